package authority

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/internal/store"
	"github.com/fencegate/fencegate/authority/statemachine"
)

func fenceProto(snap store.Snapshot, leaseTTL time.Duration) *fencev1.Fence {
	s := snap.State
	f := &fencev1.Fence{
		Domain:   snap.Domain,
		Holder:   holderProto(s.Holder),
		LeaseTtl: durationpb.New(leaseTTL),
		Revision: snap.Revision,
	}
	if p := s.Pending; p != nil {
		f.Pending = &fencev1.PendingTakeover{
			ClusterName: p.Name,
			ClusterUid:  p.UID,
			Epoch:       p.Epoch,
			RequestTime: timestamp(p.RequestedAt),
		}
	}
	for uid, c := range s.Clusters {
		f.Clusters = append(f.Clusters, clusterProto(uid, c))
	}
	slices.SortFunc(f.Clusters, func(a, b *fencev1.ClusterRecord) int {
		return cmp.Or(cmp.Compare(a.ClusterName, b.ClusterName), cmp.Compare(a.ClusterUid, b.ClusterUid))
	})
	return f
}

func clusterProto(uid string, c statemachine.Cluster) *fencev1.ClusterRecord {
	return &fencev1.ClusterRecord{
		ClusterName:     c.Name,
		ClusterUid:      uid,
		HighestEpoch:    c.HighestEpoch,
		LastEpoch:       c.LastEpoch,
		LastDeclareTime: timestamp(c.LastDeclaredAt),
	}
}

func holderProto(h *statemachine.Holder) *fencev1.Holder {
	if h == nil {
		return nil
	}
	out := &fencev1.Holder{
		ClusterName:     h.Name,
		ClusterUid:      h.UID,
		Epoch:           h.Epoch,
		LeaseExpireTime: timestamp(h.LeaseExpiresAt),
		Token:           h.Token,
		Released:        h.Released,
		AcquireTime:     timestamp(h.AcquiredAt),
		Grant:           string(h.Grant),
		Revoked:         h.Revoked,
		RevokedEpoch:    h.RevokedEpoch,
	}
	for _, name := range slices.Sorted(maps.Keys(h.Instances)) {
		l := h.Instances[name]
		out.Instances = append(out.Instances, &fencev1.InstanceLease{
			Instance:        name,
			Epoch:           l.Epoch,
			LeaseExpireTime: timestamp(l.ExpiresAt),
			Released:        l.Released,
			Revoked:         l.Revoked,
		})
	}
	return out
}

func timestamp(u statemachine.UnixNano) *timestamppb.Timestamp {
	if u == 0 {
		return nil
	}
	return timestamppb.New(u.Time())
}

// eventTypeProto is the type of a watch event: the most significant change.
func eventTypeProto(types []statemachine.EventType) fencev1.FenceEventType {
	if len(types) == 0 {
		return fencev1.FenceEventType_FENCE_EVENT_TYPE_SNAPSHOT
	}
	switch types[0] {
	case statemachine.HolderChanged:
		return fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED
	case statemachine.HolderReleased:
		return fencev1.FenceEventType_FENCE_EVENT_TYPE_RELEASED
	case statemachine.HolderRevoked:
		return fencev1.FenceEventType_FENCE_EVENT_TYPE_REVOKED
	default:
		return fencev1.FenceEventType_FENCE_EVENT_TYPE_PENDING_CHANGED
	}
}

func actorProto(a *store.Actor) *fencev1.Actor {
	if a == nil {
		return nil
	}
	return &fencev1.Actor{Identity: a.Identity, Method: a.Method, Peer: a.Peer}
}

var historyTypes = map[statemachine.HistoryKind]fencev1.FenceHistoryEventType{
	statemachine.HistoryGranted:        fencev1.FenceHistoryEventType_FENCE_HISTORY_EVENT_TYPE_GRANTED,
	statemachine.HistoryPending:        fencev1.FenceHistoryEventType_FENCE_HISTORY_EVENT_TYPE_PENDING,
	statemachine.HistoryPendingDropped: fencev1.FenceHistoryEventType_FENCE_HISTORY_EVENT_TYPE_PENDING_DROPPED,
	statemachine.HistoryReleased:       fencev1.FenceHistoryEventType_FENCE_HISTORY_EVENT_TYPE_RELEASED,
	statemachine.HistoryRevoked:        fencev1.FenceHistoryEventType_FENCE_HISTORY_EVENT_TYPE_REVOKED,
	statemachine.HistoryForgotten:      fencev1.FenceHistoryEventType_FENCE_HISTORY_EVENT_TYPE_FORGOTTEN,
	statemachine.HistoryLeaseExpired:   fencev1.FenceHistoryEventType_FENCE_HISTORY_EVENT_TYPE_LEASE_EXPIRED,
}

func historyProto(ev store.HistoryEvent) *fencev1.FenceHistoryEvent {
	out := &fencev1.FenceHistoryEvent{
		Type:         historyTypes[ev.Kind],
		Time:         timestamp(ev.At),
		ClusterName:  ev.Cluster.Name,
		ClusterUid:   ev.Cluster.UID,
		Epoch:        ev.Epoch,
		Instance:     ev.Instance,
		AllInstances: ev.AllInstances,
		Token:        ev.Token,
		Grant:        string(ev.Grant),
		Actor:        actorProto(&ev.Actor),
		Revision:     ev.Revision,
	}
	if p := ev.Previous; p != nil {
		out.Previous = &fencev1.Holder{ClusterName: p.Name, ClusterUid: p.UID, Epoch: p.Epoch, Token: p.Token}
	}
	return out
}
