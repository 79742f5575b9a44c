package e2e

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// TestImage runs the binary of the container image that hack/image builds (make image),
// taken out of its layer as a container runtime would unpack it, as `fleetwatch serve`
// against real clusters, and checks the config that runs it: the image at
// FLEETWATCH_IMAGE_LAYOUT (make test-e2e builds it there), or one built for the host's
// platform alone. The layout is read with the standard library, as the OCI image spec
// says it, not with go-containerregistry that wrote it (hack/image's tests read it with
// that, and check the rest: the platforms, the files, the CA roots, the labels).
func TestImage(t *testing.T) {
	t.Parallel()
	dir := os.Getenv("FLEETWATCH_IMAGE_LAYOUT")
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "image")
		cmd := exec.Command("go", "run", ".", "-out", dir, "-repo", "../..", "-version", "e2e", "-platforms", "linux/"+runtime.GOARCH)
		cmd.Dir = "../../hack/image"
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/image: %v\n%s", err, out)
		}
	}
	img := readImage(t, dir, "linux", runtime.GOARCH)
	if img.User != "65532:65532" || !slices.Equal(img.Entrypoint, []string{"/usr/local/bin/fleetwatch"}) || !slices.Equal(img.Cmd, []string{"serve"}) {
		t.Fatalf("the image runs %v %v as %q, want /usr/local/bin/fleetwatch serve as 65532:65532", img.Entrypoint, img.Cmd, img.User)
	}
	bin := filepath.Join(t.TempDir(), "fleetwatch")
	if err := os.WriteFile(bin, img.files["usr/local/bin/fleetwatch"], 0o755); err != nil {
		t.Fatal(err)
	}

	env := testenv.New(t, testenv.Options{Names: []string{"prod-eu", "prod-us"}})
	ctx := t.Context()
	for _, c := range env.Clusters {
		if err := c.Seed(ctx, testenv.SampleOptions{Deployments: 2, Replicas: 2}); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	tmp := t.TempDir()
	cfgPath := filepath.Join(tmp, "fleetwatch.yaml")
	cfg := fmt.Sprintf("kubeconfig: [%q]\nresources:\n  - name: pods\nsnapshot:\n  path: %q\nserver:\n  address: 127.0.0.1:%d\n",
		env.Kubeconfig, filepath.Join(tmp, "fleetwatch.db"), port)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, bin, cfgPath) // the image's command, serve, with the config
	waitReadyz(t, http.DefaultClient, base)

	resp, err := http.Get(base + "/clusters/*/api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("list pods: %d %v\n%.500s", resp.StatusCode, err, body)
	}
	if got, want := itemKeys(t, string(body)), truthKeys(ctx, t, env.Clusters, nil); !slices.Equal(got, want) {
		t.Errorf("pods of the fleet:\n got %v\nwant %v", got, want)
	}
}

// ociDescriptor, ociIndex, ociManifest and ociConfig are the parts of the OCI image
// spec's documents that TestImage reads.
type ociDescriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Platform  *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

type ociIndex struct {
	Manifests []ociDescriptor `json:"manifests"`
}

type ociManifest struct {
	Config ociDescriptor   `json:"config"`
	Layers []ociDescriptor `json:"layers"`
}

type ociConfig struct {
	Config struct {
		User       string   `json:"User"`
		Entrypoint []string `json:"Entrypoint"`
		Cmd        []string `json:"Cmd"`
	} `json:"config"`
}

// ociImage is an image's run config and the regular files of its layers, applied in
// order.
type ociImage struct {
	User            string
	Entrypoint, Cmd []string
	files           map[string][]byte
}

// readImage reads the image for goos/arch of the OCI image layout at dir: its index.json's
// one entry, an image index, and that index's manifest for the platform.
func readImage(t *testing.T, dir, goos, arch string) ociImage {
	t.Helper()
	var top, idx ociIndex
	readJSON(t, filepath.Join(dir, "index.json"), &top)
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Fatalf("index.json holds %+v, want one image index", top.Manifests)
	}
	readJSON(t, blobPath(t, dir, top.Manifests[0].Digest), &idx)
	var m ociManifest
	for _, d := range idx.Manifests {
		if d.Platform != nil && d.Platform.OS == goos && d.Platform.Architecture == arch {
			readJSON(t, blobPath(t, dir, d.Digest), &m)
		}
	}
	if m.Config.Digest == "" {
		t.Fatalf("the image index has no manifest for %s/%s: %+v", goos, arch, idx.Manifests)
	}
	var cfg ociConfig
	readJSON(t, blobPath(t, dir, m.Config.Digest), &cfg)
	img := ociImage{User: cfg.Config.User, Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd, files: map[string][]byte{}}
	for _, l := range m.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Fatalf("a layer of media type %s", l.MediaType)
		}
		f, err := os.Open(blobPath(t, dir, l.Digest))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Typeflag == tar.TypeReg {
				if img.files[h.Name], err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return img
}

// blobPath is the path of the blob digest in the layout at dir, whose contents it checks
// against the digest.
func blobPath(t *testing.T, dir, digest string) string {
	t.Helper()
	hexSum, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q is not sha256", digest)
	}
	p := filepath.Join(dir, "blobs", "sha256", hexSum)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexSum {
		t.Fatalf("blob %s has digest sha256:%x", digest, sum)
	}
	return p
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
