package fenceagent

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fencestate"
)

// waitFor bounds every wait of the tests for something the agent does.
const waitFor = 10 * time.Second

// scriptedAuthority is an in-process FenceService whose every declaration is
// handed to the test, which answers it when and how it wants.
type scriptedAuthority struct {
	fencev1.UnimplementedFenceServiceServer
	declares chan *declareCall
	// events are sent to every open WatchFence stream (one at a time).
	events chan *fencev1.WatchFenceResponse
	// watchErrs, when it holds an error, fails the next WatchFence open.
	watchErrs chan error
	// onRelease answers ReleaseFence; nil answers OK.
	onRelease func(context.Context, *fencev1.ReleaseFenceRequest) error

	mu       sync.Mutex
	releases []*fencev1.ReleaseFenceRequest
	watches  int
}

// declareCall is one DeclareClusterEpoch waiting for its answer.
type declareCall struct {
	ctx   context.Context
	req   *fencev1.DeclareClusterEpochRequest
	reply chan declareReply
}

type declareReply struct {
	resp *fencev1.DeclareClusterEpochResponse
	err  error
}

func (a *scriptedAuthority) DeclareClusterEpoch(ctx context.Context, req *fencev1.DeclareClusterEpochRequest) (*fencev1.DeclareClusterEpochResponse, error) {
	c := &declareCall{ctx: ctx, req: req, reply: make(chan declareReply, 1)}
	select {
	case a.declares <- c:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	select {
	case r := <-c.reply:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (a *scriptedAuthority) ReleaseFence(ctx context.Context, req *fencev1.ReleaseFenceRequest) (*fencev1.ReleaseFenceResponse, error) {
	a.mu.Lock()
	a.releases = append(a.releases, req)
	onRelease := a.onRelease
	a.mu.Unlock()
	if onRelease != nil {
		if err := onRelease(ctx, req); err != nil {
			return nil, err
		}
	}
	return &fencev1.ReleaseFenceResponse{}, nil
}

func (a *scriptedAuthority) WatchFence(_ *fencev1.WatchFenceRequest, stream grpc.ServerStreamingServer[fencev1.WatchFenceResponse]) error {
	a.mu.Lock()
	a.watches++
	a.mu.Unlock()
	select {
	case err := <-a.watchErrs:
		return err
	default:
	}
	for {
		select {
		case ev := <-a.events:
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

// setOnRelease sets how ReleaseFence answers.
func (a *scriptedAuthority) setOnRelease(fn func(context.Context, *fencev1.ReleaseFenceRequest) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onRelease = fn
}

func (a *scriptedAuthority) releaseCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.releases)
}

func (a *scriptedAuthority) watchCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.watches
}

// next returns the next declaration the agent sent.
func (a *scriptedAuthority) next(t testing.TB) *declareCall {
	t.Helper()
	select {
	case c := <-a.declares:
		return c
	case <-time.After(waitFor):
		t.Fatal("no declaration reached the authority")
		return nil
	}
}

// noDeclaration fails if a declaration is waiting right now.
func (a *scriptedAuthority) noDeclaration(t testing.TB) {
	t.Helper()
	select {
	case c := <-a.declares:
		t.Fatalf("unexpected declaration of epoch %d", c.req.GetEpoch())
	default:
	}
}

// answerAll answers every declaration with fn until the test ends.
func (a *scriptedAuthority) answerAll(t testing.TB, fn func(*fencev1.DeclareClusterEpochRequest) (*fencev1.DeclareClusterEpochResponse, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case c := <-a.declares:
				resp, err := fn(c.req)
				c.answer(resp, err)
			case <-ctx.Done():
				return
			}
		}
	}()
}

func (c *declareCall) answer(resp *fencev1.DeclareClusterEpochResponse, err error) {
	c.reply <- declareReply{resp: resp, err: err}
}

// grant answers OK with a lease of ttl.
func (c *declareCall) grant(ttl time.Duration, token uint64) { c.answer(grantResp(c.req, ttl, token)) }

func grantResp(req *fencev1.DeclareClusterEpochRequest, ttl time.Duration, token uint64) (*fencev1.DeclareClusterEpochResponse, error) {
	return &fencev1.DeclareClusterEpochResponse{
		Holder: &fencev1.Holder{
			ClusterName: req.GetClusterName(), ClusterUid: req.GetClusterUid(),
			Epoch: req.GetEpoch(), Token: token,
		},
		LeaseTtl: durationpb.New(ttl),
		Token:    token,
	}, nil
}

// grantAt answers OK with a lease of ttl and the cluster generation gen.
func (c *declareCall) grantAt(ttl time.Duration, token, gen uint64) {
	resp, _ := grantResp(c.req, ttl, token)
	resp.ClusterGeneration = gen
	c.answer(resp, nil)
}

// refusalMD is an authority refusal with the given reason and metadata.
func refusalMD(reason string, md map[string]string) error {
	return rpctypes.Refusal(codes.FailedPrecondition, reason, "refused: "+reason, md)
}

// stepRefusal is EPOCH_STEP_TOO_LARGE for a declaration of declared, in a
// domain whose highest epoch is highest and whose step is step; a 0 leaves
// that metadata out.
func stepRefusal(declared, highest, step uint64) error {
	md := map[string]string{rpctypes.MetadataDeclaredEpoch: strconv.FormatUint(declared, 10)}
	if highest != 0 {
		md[rpctypes.MetadataHighestEpoch] = strconv.FormatUint(highest, 10)
	}
	if step != 0 {
		md[rpctypes.MetadataMaxEpochStep] = strconv.FormatUint(step, 10)
	}
	return refusalMD(rpctypes.ReasonEpochStepTooLarge, md)
}

// restoredRefusal is CLUSTER_RESTORED for a declaration that presents
// generation presented while the cluster's is current.
func restoredRefusal(presented, current uint64) error {
	return refusalMD(rpctypes.ReasonClusterRestored, map[string]string{
		rpctypes.MetadataPresentedGeneration: strconv.FormatUint(presented, 10),
		rpctypes.MetadataClusterGeneration:   strconv.FormatUint(current, 10),
	})
}

// refusalAt is refusalErr carrying the cluster's generation gen, as the
// refusals of a declaration the authority recorded do.
func refusalAt(reason string, holder fencestate.Cluster, declared uint64, retryAfter time.Duration, gen uint64) error {
	info := rpctypes.ErrorInfo(refusalErr(reason, holder, declared, retryAfter))
	md := info.GetMetadata()
	md[rpctypes.MetadataClusterGeneration] = strconv.FormatUint(gen, 10)
	return refusalMD(reason, md)
}

// refusalErr is an authority refusal as the protocol defines it.
func refusalErr(reason string, holder fencestate.Cluster, declared uint64, retryAfter time.Duration) error {
	md := map[string]string{
		"holder_cluster": holder.Name,
		"holder_uid":     holder.UID,
		"holder_epoch":   strconv.FormatUint(holder.Epoch, 10),
		"declared_epoch": strconv.FormatUint(declared, 10),
	}
	if reason == rpctypes.ReasonAcquiring {
		md["retry_after_ms"] = strconv.FormatInt(retryAfter.Milliseconds(), 10)
	}
	st, err := status.New(codes.FailedPrecondition, "refused: "+reason).WithDetails(&errdetails.ErrorInfo{
		Reason: reason, Domain: rpctypes.ErrorDomain, Metadata: md,
	})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// serve starts srv's FenceService (or none, when srv is nil) on an in-memory
// listener and returns a client of it.
func serve(t testing.TB, srv fencev1.FenceServiceServer) fencev1.FenceServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer()
	if srv != nil {
		fencev1.RegisterFenceServiceServer(s, srv)
	}
	go func() { _ = s.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///authority",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		s.Stop()
	})
	return fencev1.NewFenceServiceClient(conn)
}

func newScriptedAuthority(t testing.TB) (*scriptedAuthority, fencev1.FenceServiceClient) {
	a := &scriptedAuthority{
		declares:  make(chan *declareCall, 16),
		events:    make(chan *fencev1.WatchFenceResponse, 16),
		watchErrs: make(chan error, 16),
	}
	return a, serve(t, a)
}

// storeWrite is one WriteFence call as a recordingWriter saw it.
type storeWrite struct {
	// agent names the writer's agent.
	agent string
	state fencestate.State
	// at is when the write returned (real time, monotonic).
	at time.Time
}

// storeLog is the writes of one or more agents in the one order they
// happened: several agents share a log to prove the order of their
// transitions.
type storeLog struct {
	mu     sync.Mutex
	writes []storeWrite
	// onWrite, if set, is called in each write's critical section.
	onWrite func(storeWrite)
}

// recordingWriter is a fencestate.Writer that records into a storeLog and can
// be told to fail.
type recordingWriter struct {
	name string
	log  *storeLog
	mu   sync.Mutex
	fail error
}

func (w *recordingWriter) WriteFence(_ context.Context, s fencestate.State) error {
	w.mu.Lock()
	fail := w.fail
	w.mu.Unlock()
	if fail != nil {
		return fail
	}
	w.log.mu.Lock()
	defer w.log.mu.Unlock()
	rec := storeWrite{agent: w.name, state: s, at: time.Now()}
	w.log.writes = append(w.log.writes, rec)
	if w.log.onWrite != nil {
		w.log.onWrite(rec)
	}
	return nil
}

func (w *recordingWriter) failWith(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail = err
}

// statuses is the sequence of statuses an agent wrote, without repeats.
func (l *storeLog) statuses(agent string) []fencestate.Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []fencestate.Status
	for _, w := range l.writes {
		if w.agent == agent && (len(out) == 0 || out[len(out)-1] != w.state.Status) {
			out = append(out, w.state.Status)
		}
	}
	return out
}

// count is the number of writes so far.
func (l *storeLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.writes)
}

// last is the last state an agent wrote.
func (l *storeLog) last(agent string) (fencestate.State, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.writes) - 1; i >= 0; i-- {
		if l.writes[i].agent == agent {
			return l.writes[i].state, true
		}
	}
	return fencestate.State{}, false
}

// first returns the index and record of an agent's first write of status s
// at or after index from; -1 if none.
func (l *storeLog) first(agent string, s fencestate.Status, from int) (int, storeWrite) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := from; i < len(l.writes); i++ {
		if w := l.writes[i]; w.agent == agent && w.state.Status == s {
			return i, w
		}
	}
	return -1, storeWrite{}
}

// logLine is one line of a captureLogs logger.
type logLine struct {
	Msg      string `json:"msg"`
	Error    string `json:"error"`
	To       string `json:"to"`
	Identity string `json:"identity"`
	Level    *int   `json:"level"`
}

// capturedLogs keeps every log line, decoded.
type capturedLogs struct {
	mu    sync.Mutex
	lines []logLine
}

func (c *capturedLogs) logger() logr.Logger {
	return funcr.NewJSON(func(obj string) {
		var l logLine
		if err := json.Unmarshal([]byte(obj), &l); err != nil {
			panic(err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.lines = append(c.lines, l)
	}, funcr.Options{Verbosity: 10})
}

func (c *capturedLogs) all() []logLine {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]logLine(nil), c.lines...)
}

// testAgent is an agent on a fake clock with everything a test inspects.
type testAgent struct {
	*ClusterFence
	clock  *clocktesting.FakeClock
	store  *storeLog
	writer *recordingWriter
	logs   *capturedLogs
	reg    *prometheus.Registry
	// signals is subscribed to the agent's changes from its start.
	signals <-chan struct{}
}

var testSelf = fencestate.Cluster{Name: "east", UID: "5d6b2a4e-0c47-4c1a-9f5e-2f7f5e2a0e11", Epoch: 7}
var testWest = fencestate.Cluster{Name: "west", UID: "9a0c1f3e-7b2d-4e58-8c61-3d4e5f607182", Epoch: 8}

// testInstance is the instance of the test agents on the fake clock.
const testInstance = "fencegate-5c7d9f8b6-q2w4e"

// newTestAgent builds an agent for east at epoch 7 on client; edit adjusts
// the options.
func newTestAgent(t testing.TB, client fencev1.FenceServiceClient, edit func(*Options)) *testAgent {
	t.Helper()
	ta := &testAgent{
		clock: clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)),
		store: &storeLog{},
		logs:  &capturedLogs{},
		reg:   prometheus.NewRegistry(),
	}
	ta.writer = &recordingWriter{name: testSelf.Name, log: ta.store}
	opts := Options{
		Client: client, Writer: ta.writer,
		ClusterName: testSelf.Name, ClusterUID: testSelf.UID, Epoch: testSelf.Epoch, Instance: testInstance,
		Clock: ta.clock, Logger: ta.logs.logger(), Registerer: ta.reg,
	}
	if edit != nil {
		edit(&opts)
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ta.ClusterFence = c
	ta.signals = c.Subscribe()
	return ta
}

// start runs the agent until the test ends, or until the returned function
// stops it (and waits for Start to return).
func (ta *testAgent) start(t testing.TB) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ta.Start(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// eventually polls cond until it holds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitStatus waits until the agent's status is s.
func (ta *testAgent) waitStatus(t testing.TB, s fencestate.Status) fencestate.State {
	t.Helper()
	return waitStatus(t, ta.ClusterFence, s)
}

// waitStatus waits until c's status is s and returns that state.
func waitStatus(t testing.TB, c *ClusterFence, s fencestate.Status) fencestate.State {
	t.Helper()
	var st fencestate.State
	eventually(t, c.opts.ClusterName+"'s status is "+string(s), func() bool {
		st = c.Status()
		return st.Status == s
	})
	return st
}

var errStoreDown = errors.New("policy store unavailable")

// startManual runs the agent without heartbeats or a watch: the test sends
// every declaration itself, with declare.
func (ta *testAgent) startManual(t testing.TB) (stop func()) {
	ta.heartbeats = false
	return ta.start(t)
}

// declare asks the running agent for one declaration and waits until it
// ended.
func (ta *testAgent) declare(ctx context.Context) outcome {
	reply := make(chan outcome, 1)
	select {
	case ta.requests <- request{declare: reply}:
	case <-ctx.Done():
		return outcome{err: ctx.Err()}
	}
	return <-reply
}
