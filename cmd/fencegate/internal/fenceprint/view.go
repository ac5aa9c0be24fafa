package fenceprint

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/utils/clock"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

// FenceView is what the commands show of a fence, in both formats; times
// relative to now are computed with the local clock.
type FenceView struct {
	Domain          string        `json:"domain"`
	Holder          *HolderView   `json:"holder,omitempty"`
	Pending         *PendingView  `json:"pending,omitempty"`
	LeaseTTLSeconds float64       `json:"lease_ttl_seconds"`
	Revision        int64         `json:"revision"`
	Clusters        []ClusterView `json:"clusters"`
}

// HolderView is the cluster that holds the fence.
type HolderView struct {
	ClusterName           string         `json:"cluster_name"`
	ClusterUID            string         `json:"cluster_uid"`
	Epoch                 uint64         `json:"epoch"`
	Token                 uint64         `json:"token"`
	Released              bool           `json:"released"`
	AcquireTime           time.Time      `json:"acquire_time"`
	LeaseExpireTime       time.Time      `json:"lease_expire_time"`
	LeaseRemainingSeconds float64        `json:"lease_remaining_seconds"`
	Revoked               bool           `json:"revoked,omitempty"`
	RevokedEpoch          uint64         `json:"revoked_epoch,omitempty"`
	Instances             []InstanceView `json:"instances"`
}

// InstanceView is the lease of one instance of the holder.
type InstanceView struct {
	Instance              string    `json:"instance"`
	Epoch                 uint64    `json:"epoch"`
	Released              bool      `json:"released"`
	Revoked               bool      `json:"revoked,omitempty"`
	LeaseExpireTime       time.Time `json:"lease_expire_time"`
	LeaseRemainingSeconds float64   `json:"lease_remaining_seconds"`
}

// PendingView is a takeover that waits for the holder's leases.
type PendingView struct {
	ClusterName string    `json:"cluster_name"`
	ClusterUID  string    `json:"cluster_uid"`
	Epoch       uint64    `json:"epoch"`
	RequestTime time.Time `json:"request_time"`
}

// ClusterView is a cluster the authority has seen declare.
type ClusterView struct {
	ClusterName     string    `json:"cluster_name"`
	ClusterUID      string    `json:"cluster_uid"`
	HighestEpoch    uint64    `json:"highest_epoch"`
	LastEpoch       uint64    `json:"last_epoch"`
	LastDeclareTime time.Time `json:"last_declare_time"`
}

// EventView is one line of `fence watch -o json`.
type EventView struct {
	Time  time.Time  `json:"time"`
	Type  string     `json:"type"`
	Fence FenceView  `json:"fence"`
	Actor *ActorView `json:"actor,omitempty"`
}

// HistoryView is one event of `fence history`, in both formats.
type HistoryView struct {
	Time         time.Time  `json:"time"`
	Type         string     `json:"type"`
	ClusterName  string     `json:"cluster_name"`
	ClusterUID   string     `json:"cluster_uid"`
	Epoch        uint64     `json:"epoch,omitempty"`
	Instance     string     `json:"instance,omitempty"`
	AllInstances bool       `json:"all_instances,omitempty"`
	Token        uint64     `json:"token,omitempty"`
	Grant        string     `json:"grant,omitempty"`
	Previous     *HolderRef `json:"previous,omitempty"`
	Actor        *ActorView `json:"actor,omitempty"`
	Revision     int64      `json:"revision"`
}

// HolderRef names a previous holder.
type HolderRef struct {
	ClusterName string `json:"cluster_name"`
	ClusterUID  string `json:"cluster_uid"`
	Epoch       uint64 `json:"epoch"`
	Token       uint64 `json:"token"`
}

// ActorView is who made a change.
type ActorView struct {
	Identity string `json:"identity"`
	Method   string `json:"method"`
	Peer     string `json:"peer,omitempty"`
}

// viewFence is the view of f at clk's now.
func viewFence(f *fencev1.Fence, clk clock.PassiveClock) FenceView {
	remaining := func(end time.Time) float64 { return max(end.Sub(clk.Now()), 0).Seconds() }
	v := FenceView{
		Domain:          f.GetDomain(),
		LeaseTTLSeconds: f.GetLeaseTtl().AsDuration().Seconds(),
		Revision:        f.GetRevision(),
		Clusters:        []ClusterView{},
	}
	if h := f.GetHolder(); h != nil {
		v.Holder = &HolderView{
			ClusterName:     h.GetClusterName(),
			ClusterUID:      h.GetClusterUid(),
			Epoch:           h.GetEpoch(),
			Token:           h.GetToken(),
			Released:        h.GetReleased(),
			AcquireTime:     h.GetAcquireTime().AsTime(),
			LeaseExpireTime: h.GetLeaseExpireTime().AsTime(),
			Revoked:         h.GetRevoked(),
			RevokedEpoch:    h.GetRevokedEpoch(),
			Instances:       []InstanceView{},
		}
		v.Holder.LeaseRemainingSeconds = remaining(v.Holder.LeaseExpireTime)
		for _, l := range h.GetInstances() {
			end := l.GetLeaseExpireTime().AsTime()
			v.Holder.Instances = append(v.Holder.Instances, InstanceView{
				Instance: l.GetInstance(), Epoch: l.GetEpoch(), Released: l.GetReleased(), Revoked: l.GetRevoked(),
				LeaseExpireTime: end, LeaseRemainingSeconds: remaining(end),
			})
		}
	}
	if p := f.GetPending(); p != nil {
		v.Pending = &PendingView{ClusterName: p.GetClusterName(), ClusterUID: p.GetClusterUid(), Epoch: p.GetEpoch(), RequestTime: p.GetRequestTime().AsTime()}
	}
	for _, c := range f.GetClusters() {
		v.Clusters = append(v.Clusters, ClusterView{
			ClusterName:     c.GetClusterName(),
			ClusterUID:      c.GetClusterUid(),
			HighestEpoch:    c.GetHighestEpoch(),
			LastEpoch:       c.GetLastEpoch(),
			LastDeclareTime: c.GetLastDeclareTime().AsTime(),
		})
	}
	return v
}

// viewEvent is the view of a watch event seen at clk's now.
func viewEvent(ev *fencev1.WatchFenceResponse, clk clock.PassiveClock) EventView {
	return EventView{
		Time:  clk.Now(),
		Type:  strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "FENCE_EVENT_TYPE_")),
		Fence: viewFence(ev.GetFence(), clk),
		Actor: viewActor(ev.GetActor()),
	}
}

func viewActor(a *fencev1.Actor) *ActorView {
	if a == nil {
		return nil
	}
	return &ActorView{Identity: a.GetIdentity(), Method: a.GetMethod(), Peer: a.GetPeer()}
}

// text is how the table shows who made a change.
func (a *ActorView) text() string {
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

func viewHistory(ev *fencev1.FenceHistoryEvent) HistoryView {
	v := HistoryView{
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
		v.Previous = &HolderRef{ClusterName: p.GetClusterName(), ClusterUID: p.GetClusterUid(), Epoch: p.GetEpoch(), Token: p.GetToken()}
	}
	return v
}

// detail is the table's description of an event beyond its type.
func (v HistoryView) detail() string {
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
		return "instance " + InstanceName(v.Instance)
	case "released", "lease_expired":
		return "instance " + InstanceName(v.Instance)
	case "forgotten":
		return fmt.Sprintf("its highest epoch was %d", v.Epoch)
	}
	return ""
}

// InstanceName shows an instance name; the empty one is that of clients
// that name none.
func InstanceName(instance string) string {
	if instance == "" {
		return `""`
	}
	return instance
}

// Timestamp shows a time as the tables do, in UTC to the second.
func Timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
