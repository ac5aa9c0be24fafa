package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fenceagent"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/internal/cli"
)

// Exit codes of fencegate eval.
const (
	evalExitDenied   = 1
	evalExitBadInput = 2
)

// evalOptions are the flags of fencegate eval.
type evalOptions struct {
	file        string
	fenceFile   string
	operation   string
	oldFile     string
	user        string
	groups      []string
	namespace   string
	subResource string
	configFile  string
	policyDir   string
	dryRun      bool
	output      string
	hold        bool
}

func newEvalCommand() *cobra.Command {
	o := &evalOptions{}
	cmd := &cobra.Command{
		Use:   "eval -f component.yaml --fence fence.json",
		Short: "Decide a Component change offline with the admission policies, as the webhook would",
		Long: `Decide a create, update or delete of a Component offline, with the same
engine and policies as the admission webhook: the request is built as the
AdmissionReview the API server would send, and the decision printed is the
one the validating (allowed, reasons, warnings) and mutating (patch)
endpoints would answer with.

The fence state (--fence) is a data.fence document as the fence agent writes
it (docs/design.md, "data.fence"), in JSON or YAML. An "active" state whose
valid_until_ns has passed is decided as "unknown", as on a cluster; leave
valid_until_ns out (or 0) for a state without a bound.

With --hold, the object is an actuator's (a CronJob, a Flux Kustomization,
…) and eval decides data.fencegate.hold for it instead, as the hold
controller would: whether it is held, the fields that hold it, whether it
has gone quiet, and the JSON patch the controller would send (none when the
object is already as the decision wants it).

Exit status: 0 when the request is allowed, 1 when it is denied, 2 when an
input is wrong (the message names the file and the problem). With --hold: 0
when the object would be left to act, 1 when it would be held, 2 for wrong
input.`,
		Example: `  # Would west, fenced by east, admit this change?
  fencegate eval -f billing.yaml --fence west-fenced.json --operation UPDATE --old-file billing-live.yaml

  # Try an edited policy with a break-glass group, as JSON
  fencegate eval --policy-dir ./policies --config config.yaml -f billing.yaml --fence fence.json \
      --user oncall --group platform:break-glass -o json

  # Would west's fencegate hold this CronJob, and with what patch?
  fencegate eval --hold -f report-cronjob.yaml --fence west-fenced.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := o.run(cmd)
			if err != nil && !errors.As(err, new(*cli.ExitCodeError)) {
				err = &cli.ExitCodeError{Code: evalExitBadInput, Err: err}
			}
			return err
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &cli.ExitCodeError{Code: evalExitBadInput, Err: err}
	})
	fs := cmd.Flags()
	fs.StringVarP(&o.file, "filename", "f", "", "the Component (YAML or JSON): the object as submitted, or for DELETE the object deleted")
	fs.StringVar(&o.fenceFile, "fence", "", "the fence state, a data.fence document (JSON or YAML)")
	fs.StringVar(&o.operation, "operation", "CREATE", "CREATE, UPDATE or DELETE")
	fs.StringVar(&o.oldFile, "old-file", "", "for UPDATE, the stored object being replaced (default: the object of -f)")
	fs.StringVar(&o.user, "user", "", "the requesting user")
	fs.StringArrayVar(&o.groups, "group", nil, "a group of the requesting user (repeat for several)")
	fs.StringVarP(&o.namespace, "namespace", "n", "default", "the namespace, when the object names none")
	fs.StringVar(&o.subResource, "subresource", "", `the subresource: "status" for a status update`)
	fs.StringVar(&o.configFile, "config", "", "operator settings for data.fencegate.config (YAML or JSON)")
	fs.StringVar(&o.policyDir, "policy-dir", "", "directory of the policies (default: the policies built into fencegate)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "mark the request as a dry run (kubectl --dry-run=server)")
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	fs.BoolVar(&o.hold, "hold", false, "decide data.fencegate.hold for an actuator's object (-f) instead of admission: held or not, and the patch the hold controller would send")
	return cmd
}

// evalOutput is what -o json prints: the decision and what it was made
// from.
type evalOutput struct {
	engine.AdmissionDecision
	// Fence is the fence state the policies saw.
	Fence fencestate.State `json:"fence"`
	// Revision is the policy revision that decided.
	Revision string `json:"revision"`
}

func (o *evalOptions) run(cmd *cobra.Command) error {
	if o.file == "" {
		return errors.New("no Component: give it with -f FILE")
	}
	if o.fenceFile == "" {
		return errors.New("no fence state: give it with --fence FILE")
	}
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q: want text or json", o.output)
	}
	if o.hold {
		return o.runHold(cmd)
	}
	op := strings.ToUpper(o.operation)
	if op != "CREATE" && op != "UPDATE" && op != "DELETE" {
		return fmt.Errorf("--operation %q: want CREATE, UPDATE or DELETE", o.operation)
	}
	object, err := readObject(o.file)
	if err != nil {
		return err
	}
	state, err := readFence(o.fenceFile)
	if err != nil {
		return err
	}
	req := engine.ReviewRequest{
		UID: "fencegate-eval", Operation: op, SubResource: o.subResource, Namespace: o.namespace,
		Username: o.user, Groups: o.groups, DryRun: o.dryRun,
	}
	switch op {
	case "CREATE":
		if o.oldFile != "" {
			return errors.New("--old-file is for UPDATE: a CREATE replaces nothing")
		}
		req.Object = object
	case "UPDATE":
		req.Object, req.OldObject = object, object
		if o.oldFile != "" {
			if req.OldObject, err = readObject(o.oldFile); err != nil {
				return err
			}
		}
	case "DELETE":
		if o.oldFile != "" {
			return errors.New("--old-file is for UPDATE: for DELETE, -f is the object deleted")
		}
		req.OldObject = object
	}
	body, err := engine.BuildReview(req)
	if err != nil {
		return fmt.Errorf("%s: %w", o.file, err)
	}

	e, err := engine.New(engine.Options{PolicyDir: o.policyDir, ConfigFile: o.configFile, Logger: logr.Discard()})
	if err != nil {
		return err
	}
	if err := e.WriteFence(cmd.Context(), state); err != nil {
		return fmt.Errorf("%s: %w", o.fenceFile, err)
	}
	// The same path as the webhook's: the AdmissionReview body in, the
	// decision out.
	res, err := e.Admit(cmd.Context(), body)
	if err != nil {
		return fmt.Errorf("evaluate the policies: %w", err)
	}
	out := evalOutput{AdmissionDecision: res.Decision, Fence: res.Fence, Revision: res.Revision}
	// Lists are printed as [] rather than null, for scripts reading them.
	for _, list := range []*[]string{&out.Reasons, &out.Warnings, &out.Violations} {
		if *list == nil {
			*list = []string{}
		}
	}
	if out.Patch == nil {
		out.Patch = []engine.PatchOperation{}
	}
	if o.output == "json" {
		err = printJSON(cmd.OutOrStdout(), out)
	} else {
		err = printDecision(cmd.OutOrStdout(), op, res.Request, out)
	}
	if err != nil {
		return fmt.Errorf("print the decision: %w", err)
	}
	if !out.Allowed {
		return &cli.ExitCodeError{Code: evalExitDenied, Err: errors.New("the request is denied")}
	}
	return nil
}

// holdOutput is what --hold -o json prints.
type holdOutput struct {
	Decision engine.HoldDecision `json:"decision"`
	// Action is what the hold controller would do: "hold", "release" or
	// "" (nothing); Patch the JSON patch it would send.
	Action hold.Action `json:"action"`
	Patch  []hold.Op   `json:"patch"`
	// Fence is the fence state the policies saw.
	Fence fencestate.State `json:"fence"`
}

// runHold decides data.fencegate.hold for the object, as the hold
// controller would, with the fence state's domain.
func (o *evalOptions) runHold(cmd *cobra.Command) error {
	if o.oldFile != "" || o.subResource != "" || cmd.Flags().Changed("operation") {
		return errors.New("--operation, --old-file and --subresource are for admission: --hold decides an object as it is")
	}
	raw, err := readObject(o.file)
	if err != nil {
		return err
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return fmt.Errorf("%s: %w", o.file, err)
	}
	state, err := readFence(o.fenceFile)
	if err != nil {
		return err
	}
	e, err := engine.New(engine.Options{PolicyDir: o.policyDir, ConfigFile: o.configFile, Logger: logr.Discard()})
	if err != nil {
		return err
	}
	if err := e.WriteFence(cmd.Context(), state); err != nil {
		return fmt.Errorf("%s: %w", o.fenceFile, err)
	}
	d := state.Domain
	if d == "" {
		d = fenceagent.DefaultDomain
	}
	decision, err := e.Hold(cmd.Context(), d, obj)
	if err != nil {
		return fmt.Errorf("evaluate the hold policy: %w", err)
	}
	step, err := hold.Plan(obj, decision)
	if err != nil {
		return fmt.Errorf("%s: %w", o.file, err)
	}
	fence, _ := e.Fence(d)
	out := holdOutput{Decision: decision, Action: step.Action, Patch: step.Patch, Fence: fence}
	if out.Patch == nil {
		out.Patch = []hold.Op{}
	}
	if o.output == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		err = enc.Encode(out)
	} else {
		err = printHold(cmd.OutOrStdout(), out)
	}
	if err != nil {
		return fmt.Errorf("print the decision: %w", err)
	}
	if decision.Hold {
		return &cli.ExitCodeError{Code: evalExitDenied, Err: errors.New("the object is held")}
	}
	return nil
}

func printHold(w io.Writer, out holdOutput) error {
	var b strings.Builder
	d := out.Decision
	switch {
	case d.Kind == "":
		b.WriteString("NOT HELD: of no held kind (no rule of data.fencegate.hold matches it)\n")
	case d.Hold:
		fmt.Fprintf(&b, "HELD: rule %s\n", d.Kind)
	default:
		fmt.Fprintf(&b, "ACTS: rule %s (this cluster holds the fence of its domain)\n", d.Kind)
	}
	for _, f := range d.Fields {
		value, err := json.Marshal(f.Value)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "  field %s held at %s\n", strings.Join(f.Path, "."), value)
	}
	if d.Quiet {
		b.WriteString("quiet: yes\n")
	} else {
		fmt.Fprintf(&b, "quiet: no: %s\n", d.Activity)
	}
	for _, p := range d.Parents {
		fmt.Fprintf(&b, "parent that could revert the hold: %s.%s %s/%s\n", p.Kind, p.Group, p.Namespace, p.Name)
	}
	if out.Action != hold.Nothing {
		ops, err := json.Marshal(out.Patch)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "the hold controller would %s it: %s\n", out.Action, ops)
	}
	f := out.Fence
	fmt.Fprintf(&b, "fence: %s of domain %s (this cluster %s@%d)\n", f.Status, f.Domain, f.Cluster.Name, f.Cluster.Epoch)
	_, err := io.WriteString(w, b.String())
	return err
}

// readObject reads one Kubernetes object from a YAML or JSON file and
// returns it as JSON.
func readObject(file string) ([]byte, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read the object: %w", err)
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var docs [][]byte
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if trimmed := bytes.TrimSpace(doc); len(trimmed) > 0 && string(trimmed) != "---" {
			docs = append(docs, doc)
		}
	}
	if len(docs) != 1 {
		return nil, fmt.Errorf("%s holds %d objects: give exactly one", file, len(docs))
	}
	js, err := yaml.YAMLToJSON(docs[0])
	if err != nil {
		return nil, fmt.Errorf("%s: not valid YAML or JSON: %w", file, err)
	}
	var obj map[string]any
	if err := json.Unmarshal(js, &obj); err != nil {
		return nil, fmt.Errorf("%s: not a Kubernetes object (want a mapping with apiVersion, kind and metadata): %w", file, err)
	}
	return js, nil
}

// readFence reads a data.fence document, refusing fields it does not know so
// that a misspelt one is not silently left out.
func readFence(file string) (fencestate.State, error) {
	var state fencestate.State
	raw, err := os.ReadFile(file)
	if err != nil {
		return state, fmt.Errorf("read the fence state: %w", err)
	}
	if err := yaml.UnmarshalStrict(raw, &state); err != nil {
		return state, fmt.Errorf("%s: not a fence state: %w", file, err)
	}
	if slices.Contains(fencestate.Statuses(), state.Status) {
		return state, nil
	}
	return state, fmt.Errorf("%s: status %q: want one of active, fenced, epoch_regressed, acquiring, unknown or unsupported", file, state.Status)
}

func printJSON(w io.Writer, out evalOutput) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(out)
}

func printDecision(w io.Writer, op string, req engine.AdmissionRequest, out evalOutput) error {
	var b strings.Builder
	verdict := "ALLOWED"
	if !out.Allowed {
		verdict = "DENIED"
	}
	target := req.Name
	if req.Namespace != "" {
		target = req.Namespace + "/" + req.Name
	}
	fmt.Fprintf(&b, "%s: %s %s", verdict, op, target)
	if req.SubResource != "" {
		fmt.Fprintf(&b, " (%s)", req.SubResource)
	}
	if req.Username != "" {
		fmt.Fprintf(&b, " by %s", req.Username)
	}
	b.WriteString("\n")
	list := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(&b, "%s:\n", title)
		for _, item := range items {
			fmt.Fprintf(&b, "  - %s\n", item)
		}
	}
	list("reasons", out.Reasons)
	list("warnings", out.Warnings)
	var ops []string
	for _, p := range out.Patch {
		js, err := json.Marshal(p)
		if err != nil {
			return err
		}
		ops = append(ops, string(js))
	}
	list("patch (mutating webhook)", ops)
	list("violations (decision log only)", out.Violations)
	f := out.Fence
	fmt.Fprintf(&b, "fence: %s (this cluster %s@%d", f.Status, f.Cluster.Name, f.Cluster.Epoch)
	if f.Holder.Name != "" {
		fmt.Fprintf(&b, ", holder %s@%d", f.Holder.Name, f.Holder.Epoch)
	}
	fmt.Fprintf(&b, ")\npolicy revision: %s\n", out.Revision)
	_, err := io.WriteString(w, b.String())
	return err
}
