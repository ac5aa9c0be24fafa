package fencestate

import (
	"fmt"
	"strconv"
	"strings"
)

// Key is the part of a fence state that decisions depend on: two states
// with the same key admit, mark and enforce alike. It leaves out what only
// times a state (its validity, its last answer) and what only explains it
// (its reason and message).
type Key struct {
	// Status is the cluster's standing.
	Status Status
	// Epoch is the epoch the cluster declares.
	Epoch uint64
	// Holder and HolderEpoch name the holder; empty when none is known.
	Holder      string
	HolderEpoch uint64
	// Token is the holder's fencing token while this cluster holds the
	// fence; 0 otherwise.
	Token uint64
}

// Key is the key of s.
func (s State) Key() Key {
	return Key{Status: s.Status, Epoch: s.Cluster.Epoch, Holder: s.Holder.Name, HolderEpoch: s.Holder.Epoch, Token: s.Token}
}

// String names the state the way the Fence status, its messages and the
// logs do: "active at epoch 2, holder west@2, token 42".
func (k Key) String() string {
	d := fmt.Sprintf("%s at epoch %d", k.Status, k.Epoch)
	if k.Holder != "" {
		d += ", holder " + k.HolderRef()
	}
	if k.Token != 0 {
		d += fmt.Sprintf(", token %d", k.Token)
	}
	return d
}

// HolderRef is the holder as NAME@EPOCH, as a Fence's status.instances
// write it; empty when no holder is known.
func (k Key) HolderRef() string {
	if k.Holder == "" {
		return ""
	}
	return k.Holder + "@" + strconv.FormatUint(k.HolderEpoch, 10)
}

// ParseHolderRef reads a HolderRef back into k's holder; an empty ref is no
// holder.
func (k *Key) ParseHolderRef(ref string) error {
	if ref == "" {
		k.Holder, k.HolderEpoch = "", 0
		return nil
	}
	name, epoch, ok := strings.Cut(ref, "@")
	if !ok || name == "" {
		return fmt.Errorf("holder %q: want NAME@EPOCH", ref)
	}
	e, err := strconv.ParseUint(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("holder %q: the epoch: %w", ref, err)
	}
	k.Holder, k.HolderEpoch = name, e
	return nil
}

// Describe names a cluster in a message: "east (epoch 3)", the epoch left
// out while it is unknown, the UID standing in for a missing name.
func (c Cluster) Describe() string {
	switch {
	case c.Name == "" && c.UID == "":
		return "an unnamed cluster"
	case c.Name == "":
		c.Name = "uid " + c.UID
	}
	if c.Epoch == 0 {
		return c.Name
	}
	return fmt.Sprintf("%s (epoch %d)", c.Name, c.Epoch)
}
