package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestFlagsRefuseBadInput(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "")
	tests := map[string]struct {
		args []string
		want string
	}{
		"no ref":          {[]string{"-o", "x.tar", "-file", "a:/a", "-epoch", "1"}, "-ref and -o are required"},
		"no epoch":        {[]string{"-ref", "r:1", "-o", "x.tar", "-file", "a:/a"}, "-epoch (or SOURCE_DATE_EPOCH) is required"},
		"no file":         {[]string{"-ref", "r:1", "-o", "x.tar", "-epoch", "1"}, "no -file"},
		"file form":       {[]string{"-ref", "r:1", "-o", "x.tar", "-epoch", "1", "-file", "a"}, `-file "a": want SRC:DST`},
		"relative dst":    {[]string{"-ref", "r:1", "-o", "x.tar", "-epoch", "1", "-file", "a:b"}, `"b" is not an absolute path`},
		"relative link":   {[]string{"-ref", "r:1", "-o", "x.tar", "-epoch", "1", "-file", "a:/a", "-symlink", "sh:busybox"}, `"sh" is not an absolute path`},
		"annotation form": {[]string{"-ref", "r:1", "-o", "x.tar", "-epoch", "1", "-file", "a:/a", "-annotation", "x"}, `-annotation "x": want KEY=VALUE`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parseFlags(%q) = %v, want an error with %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestReproducibleArchive builds the same image twice, at different times
// and with a source file touched in between: the archives are identical,
// and they hold what importers read.
func TestReproducibleArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	buildTo := func(out string) v1.Hash {
		t.Helper()
		s, err := parseFlags([]string{"-ref", "fencegate.local/tool:v1", "-o", out, "-epoch", "1700000000",
			"-file", bin + ":/bin/tool", "-symlink", "/bin/sh:tool", "-entrypoint", "/bin/tool", "-user", "65532:65532",
			"-annotation", "org.opencontainers.image.version=v1"})
		if err != nil {
			t.Fatal(err)
		}
		d, err := build(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := buildTo(filepath.Join(dir, "a.tar"))
	if err := os.Chtimes(bin, time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	second := buildTo(filepath.Join(dir, "b.tar"))
	a, _ := os.ReadFile(filepath.Join(dir, "a.tar"))
	b, _ := os.ReadFile(filepath.Join(dir, "b.tar"))
	if first != second || !bytes.Equal(a, b) {
		t.Fatalf("two builds differ: %s and %s", first, second)
	}

	files := untar(t, a)
	var index v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	desc := index.Manifests[0]
	if desc.Digest != first || desc.Annotations["io.containerd.image.name"] != "fencegate.local/tool:v1" {
		t.Errorf("index.json names %s as %v, want %s as fencegate.local/tool:v1", desc.Digest, desc.Annotations, first)
	}
	var manifest v1.Manifest
	if err := json.Unmarshal(files["blobs/sha256/"+first.Hex], &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Annotations["org.opencontainers.image.version"] != "v1" {
		t.Errorf("manifest annotations %v, want the version", manifest.Annotations)
	}
	var config v1.ConfigFile
	if err := json.Unmarshal(files["blobs/sha256/"+manifest.Config.Digest.Hex], &config); err != nil {
		t.Fatal(err)
	}
	if config.Config.User != "65532:65532" || config.Config.Entrypoint[0] != "/bin/tool" || !config.Created.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("config: user %q, entrypoint %q, created %s", config.Config.User, config.Config.Entrypoint, config.Created)
	}
	var docker []struct{ RepoTags []string }
	if err := json.Unmarshal(files["manifest.json"], &docker); err != nil || len(docker) != 1 || docker[0].RepoTags[0] != "fencegate.local/tool:v1" {
		t.Errorf("manifest.json: %v %s", err, files["manifest.json"])
	}
	gz, err := gzip.NewReader(bytes.NewReader(files["blobs/sha256/"+manifest.Layers[0].Digest.Hex]))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(layer))
	got := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(time.Unix(1700000000, 0)) || h.Uid != 0 {
			t.Errorf("layer entry %s: time %s, uid %d", h.Name, h.ModTime, h.Uid)
		}
		got[h.Name] = h.FileInfo().Mode().String() + " " + h.Linkname
	}
	want := map[string]string{"bin/": "drwxr-xr-x ", "bin/tool": "-rwxr-xr-x ", "bin/sh": "Lrwxrwxrwx tool"}
	for name, mode := range want {
		if got[name] != mode {
			t.Errorf("layer entry %s: %q, want %q (layer has %v)", name, got[name], mode, got)
		}
	}
}

func untar(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			files[h.Name], _ = io.ReadAll(tr)
		}
	}
}
