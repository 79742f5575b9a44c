package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/pem"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// wantFiles is every file of each image, flattened, with its permission bits, whether it
// is a directory, and its owner (uid and gid alike). It is written out rather than taken
// from baseEntries, so that a change to the base shows here.
var wantFiles = map[string]struct {
	mode int64
	dir  bool
	uid  int
}{
	"etc":                               {0o755, true, 0},
	"etc/group":                         {0o644, false, 0},
	"etc/nsswitch.conf":                 {0o644, false, 0},
	"etc/passwd":                        {0o644, false, 0},
	"etc/ssl":                           {0o755, true, 0},
	"etc/ssl/certs":                     {0o755, true, 0},
	"etc/ssl/certs/ca-certificates.crt": {0o644, false, 0},
	"home":                              {0o755, true, 0},
	"home/nonroot":                      {0o700, true, 65532},
	"tmp":                               {0o1777, true, 0},
	"usr":                               {0o755, true, 0},
	"usr/local":                         {0o755, true, 0},
	"usr/local/bin":                     {0o755, true, 0},
	"usr/local/bin/fleetwatch":          {0o755, false, 0},
}

// TestIndex builds the image of stand-in binaries and checks what every image must be
// (checkIndex), that the layout written reads back the same, and that a second build
// makes the same digest.
func TestIndex(t *testing.T) {
	dir := t.TempDir()
	var bins []Binary
	for _, p := range DefaultPlatforms {
		b := Binary{Platform: p, Path: filepath.Join(dir, p.Architecture)}
		if err := os.WriteFile(b.Path, []byte("fleetwatch for "+p.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		bins = append(bins, b)
	}
	meta := Meta{Version: "v0.2.0-1-g0123456", Revision: strings.Repeat("0123456789", 4), Created: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	idx, err := Index(bins, meta)
	if err != nil {
		t.Fatal(err)
	}
	got := checkIndex(t, idx, meta)
	for _, b := range bins {
		if want := "fleetwatch for " + b.Platform.String(); string(got[b.Platform.String()]) != want {
			t.Errorf("%s: the binary's layer holds %q, want %q", b.Platform, got[b.Platform.String()], want)
		}
	}

	out := filepath.Join(dir, "layout")
	if err := WriteLayout(out, idx, meta.Version); err != nil {
		t.Fatal(err)
	}
	read := readLayout(t, out, meta.Version)
	if a, b := digest(t, idx), digest(t, read); a != b {
		t.Errorf("the layout's index is %s, the built one %s", b, a)
	}
	again, err := Index(bins, meta)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := digest(t, idx), digest(t, again); a != b {
		t.Errorf("the same inputs made %s, then %s", a, b)
	}
}

// TestLayout checks the image that make image wrote, at FLEETWATCH_IMAGE_LAYOUT (make
// test-e2e sets it): what checkIndex checks, and that each binary is fleetwatch's,
// static, for its platform, stamped with no commit (whose stamp the go command writes in
// a clone and not in a worktree); the host's prints the version the labels say.
func TestLayout(t *testing.T) {
	dir := os.Getenv("FLEETWATCH_IMAGE_LAYOUT")
	if dir == "" {
		t.Skip("FLEETWATCH_IMAGE_LAYOUT is not set; make test-e2e sets it to what make image wrote")
	}
	idx := readLayout(t, dir, "")
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	meta := Meta{Version: m.Annotations["org.opencontainers.image.version"], Revision: m.Annotations["org.opencontainers.image.revision"]}
	if meta.Created, err = time.Parse(time.RFC3339, m.Annotations["org.opencontainers.image.created"]); err != nil {
		t.Fatal(err)
	}
	bins := checkIndex(t, idx, meta)
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for _, p := range DefaultPlatforms {
		bin := bins[p.String()]
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if f.Machine != machines[p.Architecture] {
			t.Errorf("%s: the binary is for %v", p, f.Machine)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Errorf("%s: the binary is dynamically linked, and the image has no libc", p)
			}
		}
		info, err := buildinfo.Read(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if info.Path != "github.com/fleetwatch/fleetwatch/cmd/fleetwatch" || settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" ||
			settings["vcs"] != "" {
			t.Errorf("%s: built as %s with %v, want cmd/fleetwatch, no cgo, -trimpath, no VCS stamp", p, info.Path, settings)
		}
		if p.Architecture != runtime.GOARCH || runtime.GOOS != "linux" {
			continue
		}
		exe := filepath.Join(t.TempDir(), "fleetwatch")
		if err := os.WriteFile(exe, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(exe, "version").CombinedOutput()
		if err != nil || string(out) != meta.Version+"\n" {
			t.Errorf("fleetwatch version: %q, %v; want %s", out, err, meta.Version)
		}
	}
}

// checkIndex checks what every image built here must be, and returns each platform's
// binary as its layer holds it. The index: OCI, the platforms of DefaultPlatforms, meta's
// labels as annotations. Each image: OCI, the config of the Dockerfile it replaces (user
// 65532:65532, entrypoint the binary, command serve) with the labels, the base layer
// shared, exactly the files of wantFiles (so no shell, nothing else that runs), dated
// meta.Created, the CA bundle parsed by crypto/x509.
func checkIndex(t *testing.T, idx v1.ImageIndex, meta Meta) map[string][]byte {
	t.Helper()
	labels := Labels(meta)
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex {
		t.Errorf("the index's media type is %s", m.MediaType)
	}
	if !maps.Equal(m.Annotations, labels) {
		t.Errorf("the index's annotations are %v, want %v", m.Annotations, labels)
	}
	var platforms []string
	for _, d := range m.Manifests {
		platforms = append(platforms, d.Platform.String())
	}
	var want []string
	for _, p := range DefaultPlatforms {
		want = append(want, p.String())
	}
	if !slices.Equal(platforms, want) {
		t.Fatalf("the index's platforms are %v, want %v", platforms, want)
	}

	bins := map[string][]byte{}
	var base v1.Hash
	for _, d := range m.Manifests {
		p := d.Platform.String()
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
			t.Errorf("%s: the manifest's media type is %s", p, mt)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture || !cf.Created.Equal(meta.Created) {
			t.Errorf("%s: the config says %s/%s, created %v", p, cf.OS, cf.Architecture, cf.Created)
		}
		if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/fleetwatch"}) ||
			!slices.Equal(c.Cmd, []string{"serve"}) || c.WorkingDir != "/home/nonroot" ||
			!slices.Contains(c.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
			t.Errorf("%s: the config is %+v", p, c)
		}
		if !maps.Equal(c.Labels, labels) {
			t.Errorf("%s: the labels are %v, want %v", p, c.Labels, labels)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 2 {
			t.Fatalf("%s: %d layers, want the base and the binary", p, len(layers))
		}
		h, err := layers[0].Digest()
		if err != nil {
			t.Fatal(err)
		}
		if base == (v1.Hash{}) {
			base = h
		} else if h != base {
			t.Errorf("%s: the base layer is %s, the first platform's %s", p, h, base)
		}
		bins[p] = checkFiles(t, p, img, meta.Created)
	}
	return bins
}

// checkFiles checks the files of img against wantFiles and returns the binary.
func checkFiles(t *testing.T, platform string, img v1.Image, created time.Time) []byte {
	t.Helper()
	r := mutate.Extract(img)
	defer r.Close()
	tr := tar.NewReader(r)
	seen := map[string]bool{}
	var bin []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		seen[h.Name] = true
		if base := path.Base(h.Name); slices.Contains([]string{"sh", "bash", "ash", "busybox", "dash"}, base) {
			t.Errorf("%s: a shell, %s", platform, h.Name)
		}
		want, ok := wantFiles[h.Name]
		switch {
		case !ok:
			t.Errorf("%s: an unexpected file %s", platform, h.Name)
			continue
		case h.Mode != want.mode || (h.Typeflag == tar.TypeDir) != want.dir || h.Uid != want.uid || h.Gid != want.uid:
			t.Errorf("%s: %s has mode %o, type %c, owner %d:%d; want mode %o, owner %d", platform, h.Name, h.Mode, h.Typeflag, h.Uid, h.Gid, want.mode, want.uid)
		case !h.ModTime.Equal(created):
			t.Errorf("%s: %s is dated %v, want %v", platform, h.Name, h.ModTime, created)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		switch h.Name {
		case "usr/local/bin/fleetwatch":
			bin = data
		case "etc/passwd":
			if !strings.Contains(string(data), "\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n") {
				t.Errorf("%s: /etc/passwd has no nonroot 65532:\n%s", platform, data)
			}
		case "etc/group":
			if !strings.Contains(string(data), "\nnonroot:x:65532:\n") {
				t.Errorf("%s: /etc/group has no nonroot 65532:\n%s", platform, data)
			}
		case "etc/ssl/certs/ca-certificates.crt":
			checkCABundle(t, platform, data)
		}
	}
	for name := range wantFiles {
		if !seen[name] {
			t.Errorf("%s: no %s", platform, name)
		}
	}
	return bin
}

// checkCABundle checks that every block of the bundle is a certificate that crypto/x509
// parses, a CA, and that there are as many as a Mozilla bundle has (more than 100).
func checkCABundle(t *testing.T, platform string, data []byte) {
	t.Helper()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) != 0 {
				t.Errorf("%s: the CA bundle ends with what is not PEM", platform)
			}
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Errorf("%s: the CA bundle's certificate %d: %v", platform, n, err)
			continue
		}
		if !c.IsCA {
			t.Errorf("%s: the CA bundle's %s is not a CA", platform, c.Subject)
		}
		n++
	}
	if n < 100 {
		t.Errorf("%s: the CA bundle has %d certificates", platform, n)
	}
}

// readLayout reads the layout at dir, whose one entry must be an image index named
// version (any name when version is empty).
func readLayout(t *testing.T, dir, version string) v1.ImageIndex {
	t.Helper()
	l, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := l.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		t.Fatalf("the layout's index.json holds %+v, want one image index", m.Manifests)
	}
	if name := m.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; version != "" && name != version {
		t.Errorf("the layout names the index %q, want %q", name, version)
	}
	idx, err := l.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func digest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
