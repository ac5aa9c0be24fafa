package engine

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
)

// snapshotStore is the OPA store the prepared queries read data from. It
// holds nothing itself: each transaction carries the data document of one
// snapshot, and an evaluation reads through the transaction of the snapshot
// it started with. So one prepared query serves every fence state of a
// policy revision, a fence write is the swap of a pointer (no commit, no
// trigger, no lock an evaluation could wait on), and no evaluation ever sees
// half of a write. It is read-only: OPA never writes to it, because the
// engine gives it no bundles or data files to load.
type snapshotStore struct{}

// dataStore is the store of every prepared query; it has no state.
var dataStore storage.Store = snapshotStore{}

// snapshotTxn is a read transaction on one snapshot's data document.
type snapshotTxn struct {
	id   uint64
	data ast.Object
}

var txnIDs atomic.Uint64

// newSnapshotTxn returns the transaction that reads data.
func newSnapshotTxn(data ast.Object) *snapshotTxn {
	return &snapshotTxn{id: txnIDs.Add(1), data: data}
}

func (t *snapshotTxn) ID() uint64 { return t.id }

func unsupported(code, what string) error {
	return &storage.Error{Code: code, Message: "the policy data store is read-only: no " + what}
}

func notFound(path storage.Path) error {
	return &storage.Error{Code: storage.NotFoundErr, Message: path.String() + ": document missing"}
}

// NewTransaction returns a transaction on an empty document. OPA opens one
// while preparing a query; every evaluation is given its snapshot's.
func (snapshotStore) NewTransaction(_ context.Context, params ...storage.TransactionParams) (storage.Transaction, error) {
	if len(params) > 0 && params[0].Write {
		return nil, unsupported(storage.WritesNotSupportedErr, "write transactions")
	}
	return newSnapshotTxn(ast.NewObject()), nil
}

// Read returns the document at path, as an AST value.
func (snapshotStore) Read(_ context.Context, txn storage.Transaction, path storage.Path) (any, error) {
	t, ok := txn.(*snapshotTxn)
	if !ok {
		return nil, &storage.Error{Code: storage.InvalidTransactionErr, Message: "not a transaction of the policy data store"}
	}
	var value ast.Value = t.data
	for _, key := range path {
		switch v := value.(type) {
		case ast.Object:
			term := v.Get(ast.StringTerm(key))
			if term == nil {
				return nil, notFound(path)
			}
			value = term.Value
		case *ast.Array:
			i, err := strconv.Atoi(key)
			if err != nil || i < 0 || i >= v.Len() {
				return nil, notFound(path)
			}
			value = v.Elem(i).Value
		default:
			return nil, notFound(path)
		}
	}
	return value, nil
}

func (snapshotStore) Write(context.Context, storage.Transaction, storage.PatchOp, storage.Path, any) error {
	return unsupported(storage.WritesNotSupportedErr, "writes")
}

func (snapshotStore) Commit(context.Context, storage.Transaction) error { return nil }

func (snapshotStore) Abort(context.Context, storage.Transaction) {}

func (snapshotStore) Truncate(context.Context, storage.Transaction, storage.TransactionParams, storage.Iterator) error {
	return unsupported(storage.WritesNotSupportedErr, "truncation")
}

func (snapshotStore) Register(context.Context, storage.Transaction, storage.TriggerConfig) (storage.TriggerHandle, error) {
	return nil, unsupported(storage.TriggersNotSupportedErr, "triggers")
}

// The engine keeps policies in its compiler, not in the store.

func (snapshotStore) ListPolicies(context.Context, storage.Transaction) ([]string, error) {
	return nil, nil
}

func (snapshotStore) GetPolicy(_ context.Context, _ storage.Transaction, id string) ([]byte, error) {
	return nil, &storage.Error{Code: storage.NotFoundErr, Message: "policy " + id + " is not in the data store"}
}

func (snapshotStore) UpsertPolicy(context.Context, storage.Transaction, string, []byte) error {
	return unsupported(storage.PolicyNotSupportedErr, "policies")
}

func (snapshotStore) DeletePolicy(context.Context, storage.Transaction, string) error {
	return unsupported(storage.PolicyNotSupportedErr, "policies")
}
