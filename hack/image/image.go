package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	// BinaryPath is where the image has the binary, its entrypoint.
	BinaryPath = "/usr/local/bin/fleetwatch"
	// User is the user and group the image runs as, nonroot's (nonrootID).
	User = "65532:65532"
	// Source is the repository the image is built from, its source label.
	Source = "https://github.com/fleetwatch/fleetwatch"
)

// DefaultCommand is the image's CMD, the daemon; the entrypoint being the binary, the
// image runs "version" and "snapshot inspect|verify" too.
var DefaultCommand = []string{"serve"}

// DefaultPlatforms are the platforms make image builds.
var DefaultPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// Meta is what the image says of its build, besides the binaries.
type Meta struct {
	// Version is the binary's version (git describe, as make build stamps it) and the
	// image's version label.
	Version string
	// Revision is the commit's full hash, the revision label.
	Revision string
	// Created dates the image, its history and every file of its layers: the commit's
	// time (or SOURCE_DATE_EPOCH), so that the same commit makes the same image.
	Created time.Time
}

// Binary is fleetwatch built for a platform, at Path.
type Binary struct {
	Platform v1.Platform
	Path     string
}

// Labels are the image's OCI labels, which the index carries as annotations too.
func Labels(m Meta) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "fleetwatch",
		"org.opencontainers.image.description": "A read-only inventory of a fleet of Kubernetes clusters: fleetwatch serve",
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.url":         Source,
		"org.opencontainers.image.version":     m.Version,
		"org.opencontainers.image.revision":    m.Revision,
		"org.opencontainers.image.created":     m.Created.UTC().Format(time.RFC3339),
	}
}

// Index is the image of bins, one manifest per platform, each the base layer (the same
// blob for all) and a layer of the binary at BinaryPath, as the OCI media types say.
func Index(bins []Binary, m Meta) (v1.ImageIndex, error) {
	entries, err := baseEntries()
	if err != nil {
		return nil, err
	}
	base, err := layer(entries, m.Created)
	if err != nil {
		return nil, err
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range bins {
		img, err := image(base, b, m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.Platform, err)
		}
		p := b.Platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return mutate.Annotations(idx, Labels(m)).(v1.ImageIndex), nil
}

func image(base v1.Layer, b Binary, m Meta) (v1.Image, error) {
	data, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, err
	}
	app, err := layer([]entry{{path: BinaryPath, mode: 0o755, data: data}}, m.Created)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: m.Created}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "hack/image: users, CA roots, /tmp, nonroot's home"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: created, CreatedBy: "hack/image: " + BinaryPath + " " + m.Version}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = b.Platform.OS, b.Platform.Architecture, b.Platform.Variant
	cf.Created = created
	cf.Config = v1.Config{
		User:       User,
		Entrypoint: []string{BinaryPath},
		Cmd:        DefaultCommand,
		Env: []string{
			"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			"SSL_CERT_FILE=" + CABundle,
		},
		WorkingDir: nonrootHome,
		Labels:     Labels(m),
	}
	return mutate.ConfigFile(img, cf)
}

// layer is the gzipped tar of entries, compressed once.
func layer(entries []entry, mtime time.Time) (v1.Layer, error) {
	b, err := layerTar(entries, mtime)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithCompressedCaching)
}

// Compile builds cmd/fleetwatch of the module at repo, static, for p into dir, as make
// build does, and with what makes it the same wherever it is built: no cgo, -trimpath,
// stripped, the baseline instruction set of the architecture, none of the environment's
// GOFLAGS, and no VCS stamp, which the go command leaves out in a git worktree and writes
// in a clone of the same commit (the revision label says the commit). The Go toolchain
// is the one that runs; another version makes another binary.
func Compile(ctx context.Context, repo, version string, p v1.Platform, dir string) (Binary, error) {
	out := filepath.Join(dir, p.OS+"-"+p.Architecture, "fleetwatch")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version="+version, "-o", out, "./cmd/fleetwatch")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0",
		"GOOS="+p.OS, "GOARCH="+p.Architecture, "GOAMD64=v1", "GOARM64=v8.0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return Binary{}, fmt.Errorf("go build for %s: %w\n%s", p, err, b)
	}
	return Binary{Platform: p, Path: out}, nil
}

// GitMeta is the Meta of the commit checked out at repo: its hash, and its committer's
// time unless SOURCE_DATE_EPOCH gives another.
func GitMeta(ctx context.Context, repo, version string) (Meta, error) {
	rev, err := git(ctx, repo, "rev-parse", "HEAD")
	if err != nil {
		return Meta{}, err
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git(ctx, repo, "log", "-1", "--format=%ct"); err != nil {
			return Meta{}, err
		}
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return Meta{}, fmt.Errorf("the source date %q: %w", epoch, err)
	}
	return Meta{Version: version, Revision: rev, Created: time.Unix(sec, 0).UTC()}, nil
}

func git(ctx context.Context, repo string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", append([]string{"-C", repo}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
