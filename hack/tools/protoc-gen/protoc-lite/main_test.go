package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/pluginpb"
)

// fakePluginEnv makes the test binary act as protoc-gen-fake: it answers
// with one file per file to generate, naming the request's parameter and
// the files it was given, or with the error the parameter asks for.
const fakePluginEnv = "PROTOC_LITE_FAKE_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(fakePluginEnv) != "" {
		fakePlugin()
		return
	}
	os.Exit(m.Run())
}

func fakePlugin() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		os.Exit(2)
	}
	var req pluginpb.CodeGeneratorRequest
	if err := proto.Unmarshal(in, &req); err != nil {
		os.Exit(3)
	}
	resp := &pluginpb.CodeGeneratorResponse{}
	switch p := req.GetParameter(); {
	case strings.HasPrefix(p, "fail="):
		resp.Error = proto.String(strings.TrimPrefix(p, "fail="))
	case strings.HasPrefix(p, "write="):
		resp.File = append(resp.File, &pluginpb.CodeGeneratorResponse_File{Name: proto.String(strings.TrimPrefix(p, "write=")), Content: proto.String("x")})
	default:
		var given []string
		for _, f := range req.GetProtoFile() {
			given = append(given, f.GetName())
		}
		for _, f := range req.GetFileToGenerate() {
			resp.File = append(resp.File, &pluginpb.CodeGeneratorResponse_File{
				Name:    proto.String(strings.TrimSuffix(f, ".proto") + ".fake"),
				Content: proto.String("parameter=" + p + " files=" + strings.Join(given, ",") + "\n"),
			})
		}
	}
	out, err := proto.Marshal(resp)
	if err != nil {
		os.Exit(4)
	}
	_, _ = os.Stdout.Write(out)
}

// withFakePlugin puts protoc-gen-fake, this test binary, on PATH.
func withFakePlugin(t *testing.T) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "protoc-gen-fake")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(fakePluginEnv, "1")
}

func writeProto(t *testing.T, dir, name, content string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRun(t *testing.T) {
	withFakePlugin(t)
	src := t.TempDir()
	writeProto(t, src, "demo/v1/demo.proto", `syntax = "proto3";
package demo.v1;
import "google/protobuf/duration.proto";
message Wait { google.protobuf.Duration wait = 1; }
`)
	writeProto(t, src, "demo/v1/broken.proto", `syntax = "proto3"; message Wait { int32 = 1; }`)
	writeProto(t, src, "demo/v1/missing.proto", `syntax = "proto3"; import "demo/v1/nowhere.proto";`)

	tests := map[string]struct {
		args    []string
		wantErr string
		want    map[string]string // file under out: content
	}{
		"generates, parameters joined, imports first": {
			args: []string{"--fake_out=OUT", "--fake_opt=a=1", "--fake_opt=b", "demo/v1/demo.proto"},
			want: map[string]string{"demo/v1/demo.fake": "parameter=a=1,b files=google/protobuf/duration.proto,demo/v1/demo.proto\n"},
		},
		"a path under the import path": {
			args: []string{"--fake_out=OUT", "SRC/demo/v1/demo.proto"},
			want: map[string]string{"demo/v1/demo.fake": "parameter= files=google/protobuf/duration.proto,demo/v1/demo.proto\n"},
		},
		"a syntax error names the file and line": {
			args: []string{"--fake_out=OUT", "demo/v1/broken.proto"}, wantErr: "demo/v1/broken.proto:1:",
		},
		"a missing import names it": {
			args: []string{"--fake_out=OUT", "demo/v1/missing.proto"}, wantErr: "demo/v1/nowhere.proto",
		},
		"a plugin's error is reported": {
			args: []string{"--fake_out=OUT", "--fake_opt=fail=no good", "demo/v1/demo.proto"}, wantErr: "protoc-gen-fake: no good",
		},
		"a file outside the output is refused": {
			args: []string{"--fake_out=OUT", "--fake_opt=write=../escape", "demo/v1/demo.proto"}, wantErr: `refusing to write "../escape"`,
		},
		"a plugin not on PATH": {
			args: []string{"--nowhere_out=OUT", "demo/v1/demo.proto"}, wantErr: "protoc-gen-nowhere",
		},
		"no files":        {args: []string{"--fake_out=OUT"}, wantErr: "no .proto files"},
		"no output":       {args: []string{"demo/v1/demo.proto"}, wantErr: "nothing to generate"},
		"an option alone": {args: []string{"--fake_opt=a", "demo/v1/demo.proto"}, wantErr: "--fake_opt without --fake_out"},
		"an unknown flag": {args: []string{"--fake", "demo/v1/demo.proto"}, wantErr: `unknown flag "--fake"`},
		"-I without a directory": {
			args: []string{"--fake_out=OUT", "demo/v1/demo.proto", "-I"}, wantErr: "-I needs a directory",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			args := []string{"-I", src}
			for _, a := range tc.args {
				args = append(args, strings.NewReplacer("OUT", out, "SRC", src).Replace(a))
			}
			var stderr bytes.Buffer
			err := run(context.Background(), args, &stderr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("run(%q) = %v, want an error with %q", args, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("run(%q): %v", args, err)
			}
			for file, want := range tc.want {
				got, err := os.ReadFile(filepath.Join(out, file))
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != want {
					t.Errorf("%s = %q, want %q", file, got, want)
				}
			}
		})
	}
}
