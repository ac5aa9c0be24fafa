package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

// historyView is one event of `fence history`, in both formats.
type historyView struct {
	Time         time.Time  `json:"time"`
	Type         string     `json:"type"`
	ClusterName  string     `json:"cluster_name"`
	ClusterUID   string     `json:"cluster_uid"`
	Epoch        uint64     `json:"epoch,omitempty"`
	Instance     string     `json:"instance,omitempty"`
	AllInstances bool       `json:"all_instances,omitempty"`
	Token        uint64     `json:"token,omitempty"`
	Grant        string     `json:"grant,omitempty"`
	Previous     *holderRef `json:"previous,omitempty"`
	Actor        *actorView `json:"actor,omitempty"`
	Revision     int64      `json:"revision"`
}

// holderRef names a previous holder.
type holderRef struct {
	ClusterName string `json:"cluster_name"`
	ClusterUID  string `json:"cluster_uid"`
	Epoch       uint64 `json:"epoch"`
	Token       uint64 `json:"token"`
}

// actorView is who made a change.
type actorView struct {
	Identity string `json:"identity"`
	Method   string `json:"method"`
	Peer     string `json:"peer,omitempty"`
}

func viewActor(a *fencev1.Actor) *actorView {
	if a == nil {
		return nil
	}
	return &actorView{Identity: a.GetIdentity(), Method: a.GetMethod(), Peer: a.GetPeer()}
}

// text is how the table shows who made a change.
func (a *actorView) text() string {
	if a == nil {
		return ""
	}
	who := a.Identity
	if who == "" {
		who = "(no identity) " + a.Peer
	}
	if i := strings.LastIndexByte(a.Method, '/'); i >= 0 {
		return who + " via " + a.Method[i+1:]
	}
	return who
}

func viewHistory(ev *fencev1.FenceHistoryEvent) historyView {
	v := historyView{
		Time:         ev.GetTime().AsTime(),
		Type:         strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "FENCE_HISTORY_EVENT_TYPE_")),
		ClusterName:  ev.GetClusterName(),
		ClusterUID:   ev.GetClusterUid(),
		Epoch:        ev.GetEpoch(),
		Instance:     ev.GetInstance(),
		AllInstances: ev.GetAllInstances(),
		Token:        ev.GetToken(),
		Grant:        ev.GetGrant(),
		Actor:        viewActor(ev.GetActor()),
		Revision:     ev.GetRevision(),
	}
	if p := ev.GetPrevious(); p != nil {
		v.Previous = &holderRef{ClusterName: p.GetClusterName(), ClusterUID: p.GetClusterUid(), Epoch: p.GetEpoch(), Token: p.GetToken()}
	}
	return v
}

// detail is the table's description of an event beyond its type.
func (v historyView) detail() string {
	switch v.Type {
	case "granted":
		d := fmt.Sprintf("token %d, %s", v.Token, strings.ReplaceAll(v.Grant, "_", " "))
		if p := v.Previous; p != nil {
			d += fmt.Sprintf(", from %s@%d (token %d)", p.ClusterName, p.Epoch, p.Token)
		}
		return d
	case "revoked":
		if v.AllInstances {
			return "every lease of the cluster"
		}
		return "instance " + instanceName(v.Instance)
	case "released", "lease_expired":
		return "instance " + instanceName(v.Instance)
	case "forgotten":
		return fmt.Sprintf("its highest epoch was %d", v.Epoch)
	}
	return ""
}

func (o *fenceOptions) printHistory(out io.Writer, events []*fencev1.FenceHistoryEvent) error {
	views := make([]historyView, 0, len(events))
	for _, ev := range events {
		views = append(views, viewHistory(ev))
	}
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(views)
	}
	if len(views) == 0 {
		_, err := fmt.Fprintf(out, "No history recorded in domain %s.\n", o.domain)
		return err
	}
	return printTable(out, func(w *printer) {
		w.printf("TIME\tEVENT\tCLUSTER\tEPOCH\tDETAIL\tBY\n")
		for _, v := range views {
			w.printf("%s\t%s\t%s\t%d\t%s\t%s\n", v.Time.UTC().Format(time.RFC3339Nano), v.Type, v.ClusterName, v.Epoch, v.detail(), v.Actor.text())
		}
	})
}
