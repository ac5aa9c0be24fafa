package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
)

func cronJob(suspend bool, active int) map[string]any {
	var running []any
	for range active {
		running = append(running, map[string]any{"name": "job"})
	}
	return map[string]any{
		"apiVersion": "batch/v1",
		"kind":       "CronJob",
		"metadata":   map[string]any{"name": "report", "namespace": "billing"},
		"spec":       map[string]any{"schedule": "* * * * *", "suspend": suspend},
		"status":     map[string]any{"active": running},
	}
}

func TestHold(t *testing.T) {
	suspended := []engine.HoldField{{Path: []string{"spec", "suspend"}, Value: true}}
	tests := map[string]struct {
		fence  bool // west fenced, else east active
		domain string
		obj    map[string]any
		want   engine.HoldDecision
	}{
		"a fenced cluster holds a CronJob": {
			fence: true, domain: "default", obj: cronJob(false, 0),
			want: engine.HoldDecision{Kind: "cronjob", Hold: true, Fields: suspended, Activity: "CronJob billing/report: spec.suspend is not true"},
		},
		"a held CronJob with a Job running is not quiet": {
			fence: true, domain: "default", obj: cronJob(true, 2),
			want: engine.HoldDecision{Kind: "cronjob", Hold: true, Fields: suspended, Activity: "CronJob billing/report: 2 Jobs still running"},
		},
		"a held CronJob with none running is quiet": {
			fence: true, domain: "default", obj: cronJob(true, 0),
			want: engine.HoldDecision{Kind: "cronjob", Hold: true, Fields: suspended, Quiet: true},
		},
		"the holder releases it": {
			domain: "default", obj: cronJob(true, 0),
			want: engine.HoldDecision{Kind: "cronjob", Fields: suspended, Quiet: true},
		},
		"an object of another domain than the state's is held": {
			domain: "payments", obj: cronJob(true, 0),
			want: engine.HoldDecision{Kind: "cronjob", Hold: true, Fields: suspended, Quiet: true},
		},
		"an object of no held kind": {
			fence: true, domain: "default", obj: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x"}},
			want: engine.HoldDecision{Quiet: true},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, engine.Options{})
			state := eastActive
			if tt.fence {
				state = westFenced
			}
			writeFence(t, e, state)
			got, err := e.Hold(context.Background(), tt.domain, tt.obj)
			if err != nil {
				t.Fatalf("Hold: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Hold = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestHoldErrors(t *testing.T) {
	policyDir := func(t *testing.T, hold string) string {
		d := enginetest.CopyPolicies(t)
		path := filepath.Join(d, "hold.rego")
		if hold == "" {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		} else {
			writeFile(t, path, "package fencegate.hold\n\n"+hold+"\n")
		}
		return d
	}
	tests := map[string]struct {
		hold string // the policy's hold.rego; "" leaves it out
		want error
		text string
	}{
		"no hold policy": {want: engine.ErrNoHoldPolicy},
		"hold is not a boolean": {
			hold: `decision := {"kind": "x", "hold": "yes", "fields": [], "quiet": true, "activity": "", "parents": []}`,
			text: "hold is a string \"yes\": want a boolean",
		},
		"a field outside spec and metadata": {
			hold: `decision := {"kind": "x", "hold": true, "fields": [{"path": ["status", "x"], "value": 1}], "quiet": true, "activity": "", "parents": []}`,
			text: "starts outside spec and metadata",
		},
		"a field without a value": {
			hold: `decision := {"kind": "x", "hold": true, "fields": [{"path": ["spec", "x"]}], "quiet": true, "activity": "", "parents": []}`,
			text: "fields[0]: has no value",
		},
		"a path of numbers": {
			hold: `decision := {"kind": "x", "hold": true, "fields": [{"path": ["spec", 1], "value": 1}], "quiet": true, "activity": "", "parents": []}`,
			text: "element 1 is a number 1",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, engine.Options{PolicyDir: policyDir(t, tt.hold)})
			writeFence(t, e, westFenced)
			_, err := e.Hold(context.Background(), "default", cronJob(false, 0))
			if err == nil {
				t.Fatal("Hold succeeded")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("Hold = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("Hold = %v, want it to say %q", err, tt.text)
			}
		})
	}
}
