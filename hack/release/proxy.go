package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// A Release is a module of the repository at a version.
type Release struct {
	// Dir is the module's directory, slash-separated and relative to the repository
	// root: "." for the root module.
	Dir string
	// Version is a semantic version, "v0.1.0".
	Version string
}

// A Source is where a module's files come from.
type Source struct {
	// Repo is the root of the git work tree.
	Repo string
	// Commit is the commit whose files are taken, as git archive gives them; when it is
	// empty, the files of the work tree that git does not ignore are.
	Commit string
}

// WriteProxy writes, under out, what a module proxy serves of each of mods (the list of
// versions, and each version's .info, .mod and .zip), from src, so that
// GOPROXY=file://out serves them. Versions already under out are kept in the lists.
func WriteProxy(out string, src Source, mods []Release) error {
	var archive *zip.Reader // of src.Commit, read once for all of mods
	for _, r := range mods {
		if !semver.IsValid(r.Version) || semver.Canonical(r.Version) != r.Version {
			return fmt.Errorf("%s: %q is not a canonical semantic version", r.Dir, r.Version)
		}
		var files []modzip.File
		var err error
		if src.Commit == "" {
			files, err = src.workTreeFiles(path.Clean(r.Dir))
		} else {
			if archive == nil {
				if archive, err = src.archive(); err != nil {
					return err
				}
			}
			files = committedFiles(archive, path.Clean(r.Dir))
		}
		if err != nil {
			return fmt.Errorf("%s: %w", r.Dir, err)
		}
		gomod, err := readFile(files, "go.mod")
		if err != nil {
			return fmt.Errorf("%s: %w", r.Dir, err)
		}
		mv := module.Version{Path: modfile.ModulePath(gomod), Version: r.Version}
		if mv.Path == "" {
			return fmt.Errorf("%s: go.mod names no module", r.Dir)
		}
		if err := writeVersion(out, mv, gomod, files); err != nil {
			return fmt.Errorf("%s: %w", mv, err)
		}
	}
	return nil
}

func writeVersion(out string, mv module.Version, gomod []byte, files []modzip.File) error {
	escaped, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var zipped bytes.Buffer
	if err := modzip.Create(&zipped, mv, files); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{mv.Version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for ext, data := range map[string][]byte{".info": info, ".mod": gomod, ".zip": zipped.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, mv.Version+ext), data, 0o644); err != nil {
			return err
		}
	}
	return writeList(filepath.Join(dir, "list"), mv.Version)
}

// writeList adds version to the list file of a module's versions.
func writeList(file, version string) error {
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	versions := strings.Fields(string(b))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	return os.WriteFile(file, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// archive is the repository at s.Commit as git archive gives it, as the go command
// fetches a tagged version.
func (s Source) archive() (*zip.Reader, error) {
	b, err := s.git("-c", "core.autocrlf=input", "-c", "core.eol=lf", "archive", "--format=zip", s.Commit)
	if err != nil {
		return nil, err
	}
	return zip.NewReader(bytes.NewReader(b), int64(len(b)))
}

// committedFiles are the files of the module in dir of archive, with paths relative to
// dir, and the repository's LICENSE when dir has none, as the go command adds it. The
// files of modules nested in it are left to modzip.Create, which omits them.
func committedFiles(zr *zip.Reader, dir string) []modzip.File {
	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	var files []modzip.File
	var license *zip.File
	for _, zf := range zr.File {
		if zf.Name == "LICENSE" {
			license = zf
		}
		name, ok := strings.CutPrefix(zf.Name, prefix)
		if !ok || name == "" || strings.HasSuffix(name, "/") {
			continue
		}
		files = append(files, zipEntry{name, zf})
	}
	if license != nil && prefix != "" && !slices.ContainsFunc(files, func(f modzip.File) bool { return f.Path() == "LICENSE" }) {
		files = append(files, zipEntry{"LICENSE", license})
	}
	return files
}

// workTreeFiles are the files of the module in dir that git tracks or would add, in the
// work tree: what a commit of the work tree would hold.
func (s Source) workTreeFiles(dir string) ([]modzip.File, error) {
	out, err := s.git("ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", dir)
	if err != nil {
		return nil, err
	}
	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	var files []modzip.File
	for p := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		name, ok := strings.CutPrefix(p, prefix)
		if p == "" || !ok {
			continue
		}
		full := filepath.Join(s.Repo, filepath.FromSlash(p))
		fi, err := os.Lstat(full)
		if os.IsNotExist(err) {
			continue // deleted, not yet committed
		}
		if err != nil {
			return nil, err
		}
		files = append(files, diskFile{name, full, fi})
	}
	return files, nil
}

func (s Source) git(args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = s.Repo
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// repoRoot is the root of the git work tree that holds dir.
func repoRoot(dir string) (string, error) {
	out, err := Source{Repo: dir}.git("rev-parse", "--show-toplevel")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

func readFile(files []modzip.File, name string) ([]byte, error) {
	for _, f := range files {
		if f.Path() != name {
			continue
		}
		r, err := f.Open()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		return io.ReadAll(r)
	}
	return nil, fmt.Errorf("no %s", name)
}

// zipEntry is a file of a git archive.
type zipEntry struct {
	name string
	f    *zip.File
}

func (e zipEntry) Path() string                 { return e.name }
func (e zipEntry) Lstat() (os.FileInfo, error)  { return e.f.FileInfo(), nil }
func (e zipEntry) Open() (io.ReadCloser, error) { return e.f.Open() }

// diskFile is a file of the work tree.
type diskFile struct {
	name, full string
	info       os.FileInfo
}

func (f diskFile) Path() string                 { return f.name }
func (f diskFile) Lstat() (os.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.full) }
