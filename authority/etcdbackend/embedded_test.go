package etcdbackend_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/fencegate/fencegate/authority/etcdbackend"
)

func TestEmbeddedKeepsDataAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := testr.NewWithInterface(t, testr.Options{})

	e, err := etcdbackend.StartEmbedded(ctx, etcdbackend.EmbeddedOptions{Dir: dir, Logger: log})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	put, err := e.Client().Put(ctx, "k", "v")
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	e.Close()

	e, err = etcdbackend.StartEmbedded(ctx, etcdbackend.EmbeddedOptions{Dir: dir, Logger: log})
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer e.Close()
	got, err := e.Client().Get(ctx, "k")
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" || got.Kvs[0].ModRevision != put.Header.Revision {
		t.Errorf("after restart k = %v, want v at revision %d", got.Kvs, put.Header.Revision)
	}
}

func TestEmbeddedRefusesADataDirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := testr.NewWithInterface(t, testr.Options{})
	e, err := etcdbackend.StartEmbedded(ctx, etcdbackend.EmbeddedOptions{Dir: dir, Logger: log})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer e.Close()

	other, err := etcdbackend.StartEmbedded(ctx, etcdbackend.EmbeddedOptions{Dir: dir, Logger: log})
	if err == nil {
		other.Close()
		t.Fatal("a second etcd started on a data directory in use")
	}
	if want := "data directory " + dir + " is in use by another fence authority"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestEmbeddedNeedsADirectory(t *testing.T) {
	if _, err := etcdbackend.StartEmbedded(context.Background(), etcdbackend.EmbeddedOptions{}); err == nil {
		t.Fatal("started without a data directory")
	}
}
