package hold_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
)

// TestRandomHoldHistories interleaves, on a real API server, fence
// transitions (active, fenced, unknown), a person's own suspends and
// resumes of CronJobs (server-side applies of spec.suspend) and restarts
// of the hold controller. After each step it waits for the CronJobs to
// settle where the model says, and fails when they do not:
//   - while the cluster does not hold the fence, every CronJob is held;
//   - while it does, a CronJob is suspended exactly when the person's last
//     word on it was to suspend it: fencegate releases what it held, and
//     never resumes what the person suspended;
//   - nothing fencegate held keeps its record once released.
//
// FENCEGATE_HOLD_SEED replays a history; FENCEGATE_HOLD_STEPS sets its
// length (30; 12 with -short).
func TestRandomHoldHistories(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FENCEGATE_HOLD_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("FENCEGATE_HOLD_SEED=%q: %v", s, err)
		}
	}
	steps := 30
	if testing.Short() {
		steps = 12
	}
	if s := os.Getenv("FENCEGATE_HOLD_STEPS"); s != "" {
		var err error
		if steps, err = strconv.Atoi(s); err != nil {
			t.Fatalf("FENCEGATE_HOLD_STEPS=%q: %v", s, err)
		}
	}
	t.Logf("seed %d (FENCEGATE_HOLD_SEED=%d replays it), %d steps", seed, seed, steps)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))

	h := newHarness(t, active, time.Millisecond)
	ctx := context.Background()
	stop := h.runManager(t)
	defer func() { stop() }()

	const jobs = 4
	// wants is the person's last word on each CronJob: nil (none), true
	// (suspend) or false (resume).
	wants := make([]*bool, jobs)
	for i := range jobs {
		if err := h.cp.Client.Create(ctx, cronJob(jobName(i), ptr.To(false))); err != nil {
			t.Fatal(err)
		}
	}
	state := active
	unknown := fenced
	unknown.Status, unknown.Reason = fencestate.Unknown, "AUTHORITY_UNREACHABLE"
	var history []string
	for step := range steps {
		var what string
		switch r := rng.IntN(10); {
		case r < 3:
			state = []fencestate.State{active, fenced, unknown}[rng.IntN(3)]
			h.transition(t, state)
			what = "fence " + string(state.Status)
		case r < 8:
			i, suspend := rng.IntN(jobs), rng.IntN(2) == 0
			h.personApplies(t, ctx, i, suspend)
			wants[i] = &suspend
			what = fmt.Sprintf("person sets %s suspend=%v", jobName(i), suspend)
		default:
			stop()
			stop = h.runManager(t)
			what = "hold controller restarts"
		}
		history = append(history, fmt.Sprintf("%d: %s (fence %s)", step, what, state.Status))
		h.waitSettled(t, ctx, state, wants, history)
	}
}

func jobName(i int) string { return fmt.Sprintf("job-%d", i) }

// runManager runs a manager with a new hold controller until the returned
// stop is called (at most once).
func (h *harness) runManager(t *testing.T) (stop func()) {
	t.Helper()
	mgr := h.newManager(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hold controller: %v", err)
		}
	}
}

// personApplies is a person's server-side apply of spec.suspend, taking
// the field over (kubectl apply --server-side --force-conflicts). While
// the cluster does not hold the fence, this is what a person may do: a
// CronJob is not a fenced kind here.
func (h *harness) personApplies(t *testing.T, ctx context.Context, i int, suspend bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":%q,"namespace":"default"},"spec":{"suspend":%v}}`, jobName(i), suspend)
	if err := h.cp.Client.Patch(ctx, cronJob(jobName(i), nil), client.RawPatch(types.ApplyPatchType, []byte(patch)), client.FieldOwner("a-person"), client.ForceOwnership); err != nil {
		t.Fatalf("the person's apply of %s: %v", jobName(i), err)
	}
}

// waitSettled waits until every CronJob is where the model says for the
// fence state and the person's wants.
func (h *harness) waitSettled(t *testing.T, ctx context.Context, state fencestate.State, wants []*bool, history []string) {
	t.Helper()
	var problems []string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		problems = problems[:0]
		for i, want := range wants {
			var cj batchv1.CronJob
			if err := h.cp.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: jobName(i)}, &cj); err != nil {
				return false, err
			}
			suspended := ptr.Deref(cj.Spec.Suspend, false)
			_, recorded := cj.Annotations[hold.RecordAnnotation]
			switch {
			case state.Status != fencestate.Active && !suspended:
				problems = append(problems, fmt.Sprintf("%s runs while the cluster is %s", cj.Name, state.Status))
			case state.Status == fencestate.Active && suspended != (want != nil && *want):
				problems = append(problems, fmt.Sprintf("%s has suspend=%v while active; the person's last word: %v", cj.Name, suspended, describeWant(want)))
			case state.Status == fencestate.Active && recorded:
				problems = append(problems, fmt.Sprintf("%s keeps its hold record while active", cj.Name))
			}
		}
		return len(problems) == 0, nil
	})
	if err != nil {
		t.Fatalf("not settled after step %s: %v\n  %s\nhistory:\n  %s", history[len(history)-1], err, strings.Join(problems, "\n  "), strings.Join(history, "\n  "))
	}
}

func describeWant(w *bool) string {
	if w == nil {
		return "none"
	}
	if *w {
		return "suspend"
	}
	return "resume"
}
