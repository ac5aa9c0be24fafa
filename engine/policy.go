package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/fencegate/fencegate/policies"
)

// The entry points the Go side evaluates (docs/design.md, "Policies").
var (
	admissionEntryPoint = ast.MustParseRef("data.fencegate.admission.decision")
	reconcileEntryPoint = ast.MustParseRef("data.fencegate.reconcile.decision")
)

// policyFile is one Rego file as read from the policy source.
type policyFile struct {
	name    string
	content []byte
}

// policySource is what a load reads: the policy files, the config and
// their revision.
type policySource struct {
	files  []policyFile
	config map[string]any
	// unknownConfigKeys are config keys the shipped policies do not read.
	unknownConfigKeys []string
	// revision is revisionOf(files, config).
	revision string
}

// policy is one compiled revision of the policies and the config. It is
// immutable once built; snapshots of the fence state share it.
type policy struct {
	// revision is a content hash of the policy files and the config.
	revision string
	// files are the policy files' names, sorted.
	files []string
	// config is data.fencegate.config.
	config map[string]any
	// unknownConfigKeys are config keys the shipped policies do not read.
	unknownConfigKeys []string
	// modules are the parsed modules before compilation; the residual
	// compilers of partial evaluation compile copies of them.
	modules map[string]*ast.Module
	// compiler holds the compiled modules. It is shared, read-only, by all
	// evaluations of this revision.
	compiler *ast.Compiler
	// inputPaths are the parts of the AdmissionReview the policies read.
	inputPaths *pathTree
	// keepRules are the rules partial evaluation leaves as references
	// (conflictingRules).
	keepRules []string
	// admission and reconcile are the entry points' queries, prepared once
	// for every snapshot of this revision; hold is the hold entry point's,
	// nil when the policies leave it out.
	admission, reconcile rego.PreparedEvalQuery
	hold                 *rego.PreparedEvalQuery
	// residualLogged is set once it was logged that partial evaluation
	// gave no usable residual for this revision.
	residualLogged atomic.Bool
}

// readPolicyFiles reads the *.rego files of dir, or the embedded shipped
// policies when dir is empty, leaving out Rego unit tests (*_test.rego) and
// the hidden entries of a mounted ConfigMap (..data and the like).
func readPolicyFiles(dir string) ([]policyFile, error) {
	if dir == "" {
		return readRegoFiles(policies.FS, func(name string) string { return name })
	}
	return readRegoFiles(os.DirFS(dir), func(name string) string { return filepath.Join(dir, name) })
}

// readRegoFiles reads the policy files at the root of fsys.
func readRegoFiles(fsys fs.FS, displayName func(string) string) ([]policyFile, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read policy directory %s: %w", displayName("."), err)
	}
	var files []policyFile
	for _, entry := range entries {
		name := entry.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".rego") || strings.HasSuffix(name, "_test.rego") {
			continue
		}
		// Stat follows the symbolic links a ConfigMap volume is made of.
		info, err := fs.Stat(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read policy file %s: %w", displayName(name), err)
		}
		if info.IsDir() {
			continue
		}
		content, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read policy file %s: %w", displayName(name), err)
		}
		files = append(files, policyFile{name: displayName(name), content: content})
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("policy directory %s holds no .rego files", displayName("."))
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	return files, nil
}

// revisionOf hashes the policy files (by base name, so that the same files
// mounted elsewhere have the same revision) and the config: two loads with
// the same revision make the same decisions.
func revisionOf(files []policyFile, config map[string]any) (string, error) {
	h := sha256.New()
	for _, f := range files {
		// A hash.Hash never fails to write.
		_, _ = fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(f.name), len(f.content))
		h.Write(f.content)
	}
	canonical, err := json.Marshal(config) // map keys are sorted
	if err != nil {
		return "", fmt.Errorf("hash config: %w", err)
	}
	h.Write([]byte("config\x00"))
	h.Write(canonical)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// compilePolicy parses and compiles the files, checks that both entry points
// are defined and finds the input paths the policies read.
func compilePolicy(src policySource) (*policy, error) {
	modules := make(map[string]*ast.Module, len(src.files))
	names := make([]string, 0, len(src.files))
	var parseErrs []error
	for _, f := range src.files {
		m, err := ast.ParseModuleWithOpts(f.name, string(f.content), ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			parseErrs = append(parseErrs, err)
			continue
		}
		modules[f.name] = m
		names = append(names, f.name)
	}
	if err := errors.Join(parseErrs...); err != nil {
		return nil, fmt.Errorf("parse policies: %w", err)
	}
	compiler, err := compileModules(modules)
	if err != nil {
		return nil, err
	}
	for _, entry := range []ast.Ref{admissionEntryPoint, reconcileEntryPoint} {
		if len(compiler.GetRules(entry)) == 0 {
			return nil, fmt.Errorf("the policies define no rule %v: it is an entry point fencegate evaluates", entry)
		}
	}
	p := &policy{
		revision:          src.revision,
		files:             names,
		config:            src.config,
		unknownConfigKeys: src.unknownConfigKeys,
		modules:           modules,
		compiler:          compiler,
		inputPaths:        inputPathsOf(compiler.Modules).seal(),
		keepRules:         conflictingRules(compiler),
	}
	if p.admission, err = prepare(context.Background(), compiler, admissionEntryPoint); err != nil {
		return nil, err
	}
	if p.reconcile, err = prepare(context.Background(), compiler, reconcileEntryPoint); err != nil {
		return nil, err
	}
	if len(compiler.GetRules(holdEntryPoint)) > 0 {
		hold, err := prepare(context.Background(), compiler, holdEntryPoint)
		if err != nil {
			return nil, err
		}
		p.hold = &hold
	}
	return p, nil
}

// compileModules compiles copies of the modules, so that the parsed ones can
// be compiled again with other modules.
func compileModules(modules map[string]*ast.Module) (*ast.Compiler, error) {
	copies := make(map[string]*ast.Module, len(modules))
	for name, m := range modules {
		copies[name] = m.Copy()
	}
	compiler := ast.NewCompiler()
	if compiler.Compile(copies); compiler.Failed() {
		return nil, fmt.Errorf("compile policies: %w", compiler.Errors)
	}
	return compiler, nil
}
