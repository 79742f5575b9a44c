// Command image builds fleetwatch's container image without Docker, as ko does: the
// binary compiled by the go command for each platform, static, on a base made here of
// what a static binary needs (distroless static's nonroot: the users, the CA roots of
// golang.org/x/crypto/x509roots/fallback, /tmp, nonroot's home; no shell), as the
// non-root user 65532, written as an OCI image layout whose index.json holds the
// multi-platform index, which crane push and skopeo copy push as it is.
//
//	image -out DIR [-repo DIR] [-version VERSION] [-platforms linux/amd64,linux/arm64]
//
// The same commit, built with the same Go toolchain, gives the same digest: every time
// in the image is the commit's (or SOURCE_DATE_EPOCH), the binary is built with
// -trimpath and without VCS stamping, the CA roots are those of the module version in
// go.mod. make image runs it; the image's tests are this module's (TestLayout reads what
// make image wrote) and test/e2e's TestImage, which runs the binary of the host's
// platform, taken out of its layer, against real clusters.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	out := fs.String("out", "", "the directory to write the OCI image layout to, replaced if it exists (required)")
	repo := fs.String("repo", ".", "the repository's root directory")
	version := fs.String("version", "dev", "the version the binary says and the image's version label")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "the platforms to build, comma-separated")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := build(ctx, *out, *repo, *version, *platforms); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		return 1
	}
	return 0
}

func build(ctx context.Context, out, repo, version, platforms string) error {
	if out == "" {
		return errors.New("-out is required")
	}
	var ps []v1.Platform
	for _, s := range strings.Split(platforms, ",") {
		p, err := v1.ParsePlatform(s)
		if err != nil {
			return err
		}
		ps = append(ps, *p)
	}
	meta, err := GitMeta(ctx, repo, version)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "fleetwatch-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var bins []Binary
	for _, p := range ps {
		b, err := Compile(ctx, repo, version, p, tmp)
		if err != nil {
			return err
		}
		bins = append(bins, b)
	}
	idx, err := Index(bins, meta)
	if err != nil {
		return err
	}
	if err := WriteLayout(out, idx, version); err != nil {
		return err
	}
	summary, err := Describe(idx, bins)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s", out, summary)
	return nil
}

// WriteLayout writes idx as the one entry of a new OCI image layout at dir, named
// version (org.opencontainers.image.ref.name, as skopeo's oci:DIR:NAME reads it).
func WriteLayout(dir string, idx v1.ImageIndex, version string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": version}))
}

// Describe says the index's digest and, per platform, the manifest's digest, the image's
// size as pushed (config and compressed layers) and the binary's.
func Describe(idx v1.ImageIndex, bins []Binary) (string, error) {
	d, err := idx.Digest()
	if err != nil {
		return "", err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "index %s\n", d)
	for i, desc := range m.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return "", err
		}
		size, err := pushedSize(img)
		if err != nil {
			return "", err
		}
		fi, err := os.Stat(bins[i].Path)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%-12s %s  image %s, binary %s (%s)\n", desc.Platform, desc.Digest, mb(size), mb(fi.Size()), filepath.Base(bins[i].Path))
	}
	return b.String(), nil
}

// pushedSize is what a registry stores of img: its manifest, config and compressed layers.
func pushedSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
