// Command build-image writes a container image made of files on disk to an
// image archive, with no container engine and nothing pulled: an empty base,
// one layer holding the given files, and the config (entrypoint, user,
// environment, labels) given by flags.
//
// The image is reproducible: file times, the layer's owner and the image's
// creation time come from -epoch (the commit time in `make image`), so the
// same inputs give the same digest, which it prints.
//
// The archive is an OCI image layout (oci-layout, index.json, blobs/) that
// also carries Docker's manifest.json, so every usual importer reads it with
// the name -ref: `ctr images import`, `docker load`, `kind load
// image-archive`, `k3d image import`, and `skopeo copy oci-archive:...`.
//
//	build-image -ref fencegate.local/fencegate:v1 -o image.tar \
//	  -file bin/fencegate:/fencegate -entrypoint /fencegate -user 65532:65532 \
//	  -annotation org.opencontainers.image.version=v1
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// listFlag is a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// spec is what an image is built from.
type spec struct {
	ref         string
	out         string
	arch        string
	epoch       time.Time
	files       []fileEntry
	symlinks    []fileEntry
	entrypoint  []string
	cmd         []string
	user        string
	env         []string
	annotations map[string]string
}

// fileEntry is a file of the layer: src on disk (or a link target) at dst.
type fileEntry struct{ src, dst string }

func main() {
	s, err := parseFlags(os.Args[1:])
	if err == nil {
		var digest v1.Hash
		if digest, err = build(s); err == nil {
			fmt.Printf("%s@%s\n", s.ref, digest)
			return
		}
	}
	fmt.Fprintln(os.Stderr, "build-image:", err)
	os.Exit(2)
}

func parseFlags(args []string) (spec, error) {
	fs := flag.NewFlagSet("build-image", flag.ContinueOnError)
	var s spec
	var files, links, entrypoint, cmd, env, annotations listFlag
	var epoch int64
	fs.StringVar(&s.ref, "ref", "", "image name and tag, e.g. fencegate.local/fencegate:v1 (required)")
	fs.StringVar(&s.out, "o", "", "archive to write (required)")
	fs.StringVar(&s.arch, "arch", runtime.GOARCH, "architecture of the files (GOARCH)")
	fs.Int64Var(&epoch, "epoch", -1, "creation time and file times, in Unix seconds (default $SOURCE_DATE_EPOCH)")
	fs.Var(&files, "file", "SRC:DST, a file of the image (repeatable); its mode is the source's")
	fs.Var(&links, "symlink", "DST:TARGET, a symbolic link of the image (repeatable)")
	fs.Var(&entrypoint, "entrypoint", "an element of the entrypoint (repeatable)")
	fs.Var(&cmd, "cmd", "an element of the default arguments (repeatable)")
	fs.StringVar(&s.user, "user", "", "user the container runs as, UID:GID")
	fs.Var(&env, "env", "KEY=VALUE of the environment (repeatable)")
	fs.Var(&annotations, "annotation", "KEY=VALUE on the manifest and as a label (repeatable)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	var errs []error
	if s.ref == "" || s.out == "" {
		errs = append(errs, errors.New("-ref and -o are required"))
	}
	if epoch < 0 {
		if v := os.Getenv("SOURCE_DATE_EPOCH"); v != "" {
			if _, err := fmt.Sscan(v, &epoch); err != nil {
				errs = append(errs, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds: %w", v, err))
			}
		}
	}
	if epoch < 0 {
		errs = append(errs, errors.New("-epoch (or SOURCE_DATE_EPOCH) is required: the image's times come from it, so that it is reproducible; `make image` passes the commit time"))
	}
	s.epoch = time.Unix(epoch, 0).UTC()
	var err error
	if s.files, err = pairs("-file", "SRC:DST", files); err != nil {
		errs = append(errs, err)
	}
	if s.symlinks, err = pairs("-symlink", "DST:TARGET", links); err != nil {
		errs = append(errs, err)
	}
	for i := range s.symlinks {
		s.symlinks[i].src, s.symlinks[i].dst = s.symlinks[i].dst, s.symlinks[i].src
	}
	if len(s.files) == 0 {
		errs = append(errs, errors.New("no -file: an image needs at least one"))
	}
	s.annotations = map[string]string{}
	for _, a := range annotations {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			errs = append(errs, fmt.Errorf("-annotation %q: want KEY=VALUE", a))
			continue
		}
		s.annotations[k] = v
	}
	s.entrypoint, s.cmd, s.env = entrypoint, cmd, env
	return s, errors.Join(errs...)
}

// pairs splits A:B flag values; B must be an absolute path in the image.
func pairs(flagName, form string, values []string) ([]fileEntry, error) {
	var out []fileEntry
	var errs []error
	for _, v := range values {
		a, b, ok := strings.Cut(v, ":")
		if !ok || a == "" || b == "" {
			errs = append(errs, fmt.Errorf("%s %q: want %s", flagName, v, form))
			continue
		}
		out = append(out, fileEntry{src: a, dst: b})
	}
	for _, e := range out {
		p := e.dst
		if flagName == "-symlink" {
			p = e.src
		}
		if !path.IsAbs(p) {
			errs = append(errs, fmt.Errorf("%s: %q is not an absolute path in the image", flagName, p))
		}
	}
	return out, errors.Join(errs...)
}

// build writes the archive and returns the image's manifest digest.
func build(s spec) (v1.Hash, error) {
	layerTar, err := layerTar(s)
	if err != nil {
		return v1.Hash{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return v1.Hash{}, fmt.Errorf("layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: s.epoch}, CreatedBy: "build-image", Comment: strings.Join(dsts(s.files), " ")},
	})
	if err != nil {
		return v1.Hash{}, fmt.Errorf("append layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("config: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.Created = v1.Time{Time: s.epoch}
	cfg.OS, cfg.Architecture = "linux", s.arch
	cfg.Config.Entrypoint = s.entrypoint
	cfg.Config.Cmd = s.cmd
	cfg.Config.User = s.user
	cfg.Config.Env = s.env
	if len(s.annotations) > 0 {
		cfg.Config.Labels = s.annotations
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return v1.Hash{}, fmt.Errorf("set config: %w", err)
	}
	img, ok := mutate.Annotations(img, s.annotations).(v1.Image)
	if !ok {
		return v1.Hash{}, errors.New("annotated image is not an image")
	}
	return writeArchive(s, img)
}

func dsts(files []fileEntry) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.dst)
	}
	return out
}

// layerTar is the layer's uncompressed tar: each file and link with its
// parent directories, owned by root, timed at the epoch, in name order.
func layerTar(s spec) ([]byte, error) {
	type entry struct {
		hdr  tar.Header
		data []byte
	}
	entries := map[string]entry{}
	addDirs := func(p string) {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			name := strings.TrimPrefix(d, "/") + "/"
			entries[name] = entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
		}
	}
	for _, f := range s.files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return nil, fmt.Errorf("-file %s: %w", f.src, err)
		}
		info, err := os.Stat(f.src)
		if err != nil {
			return nil, fmt.Errorf("-file %s: %w", f.src, err)
		}
		mode := int64(0o644)
		if info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		addDirs(f.dst)
		name := strings.TrimPrefix(path.Clean(f.dst), "/")
		entries[name] = entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: data}
	}
	for _, l := range s.symlinks {
		addDirs(l.dst)
		name := strings.TrimPrefix(path.Clean(l.dst), "/")
		entries[name] = entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: l.src, Mode: 0o777}}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		e := entries[n]
		e.hdr.ModTime = s.epoch
		e.hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", n, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", n, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return buf.Bytes(), nil
}

// writeArchive writes the OCI layout with Docker's manifest.json beside it.
func writeArchive(s spec, img v1.Image) (v1.Hash, error) {
	manifest, err := img.RawManifest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("manifest: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("digest: %w", err)
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("config: %w", err)
	}
	configName, err := img.ConfigName()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("config digest: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("layers: %w", err)
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

	type file struct {
		name string
		data []byte
	}
	files := []file{{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)}}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: types.OCIManifestSchema1,
			Size:      int64(len(manifest)),
			Digest:    digest,
			Annotations: map[string]string{
				// containerd names the image after the first; OCI tools
				// and Docker read the second.
				"io.containerd.image.name":          s.ref,
				"org.opencontainers.image.ref.name": s.ref,
			},
			Platform: &v1.Platform{OS: "linux", Architecture: s.arch},
		}},
	})
	if err != nil {
		return v1.Hash{}, fmt.Errorf("index: %w", err)
	}
	files = append(files, file{"index.json", index})
	var layerNames []string
	blobs := []file{{blob(digest), manifest}, {blob(configName), config}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return v1.Hash{}, fmt.Errorf("layer digest: %w", err)
		}
		rc, err := l.Compressed()
		if err != nil {
			return v1.Hash{}, fmt.Errorf("layer: %w", err)
		}
		data, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			return v1.Hash{}, fmt.Errorf("layer: %w", err)
		}
		layerNames = append(layerNames, blob(d))
		blobs = append(blobs, file{blob(d), data})
	}
	docker, err := json.Marshal([]map[string]any{{"Config": blob(configName), "RepoTags": []string{s.ref}, "Layers": layerNames}})
	if err != nil {
		return v1.Hash{}, fmt.Errorf("manifest.json: %w", err)
	}
	files = append(files, file{"manifest.json", docker})
	files = append(files, blobs...)

	tmp := s.out + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("create archive: %w", err)
	}
	defer func() { _ = os.Remove(tmp) }()
	tw := tar.NewWriter(out)
	dirs := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(f.name); d != "."; d = path.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	var entries []tar.Header
	for d := range dirs {
		entries = append(entries, tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755})
	}
	slices.SortFunc(entries, func(a, b tar.Header) int { return strings.Compare(a.Name, b.Name) })
	for i := range entries {
		entries[i].ModTime = s.epoch
		if err := tw.WriteHeader(&entries[i]); err != nil {
			return v1.Hash{}, fmt.Errorf("write archive: %w", err)
		}
	}
	for _, f := range files {
		hdr := tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data)), ModTime: s.epoch}
		if err := tw.WriteHeader(&hdr); err != nil {
			return v1.Hash{}, fmt.Errorf("write archive: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return v1.Hash{}, fmt.Errorf("write archive: %w", err)
		}
	}
	if err := errors.Join(tw.Close(), out.Close()); err != nil {
		return v1.Hash{}, fmt.Errorf("write archive: %w", err)
	}
	if err := os.Rename(tmp, s.out); err != nil {
		return v1.Hash{}, fmt.Errorf("write archive: %w", err)
	}
	return digest, nil
}
