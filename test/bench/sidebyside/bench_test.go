package sidebyside

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"testing"

	"github.com/fencegate/fencegate/webhook"
)

// BenchmarkWebhookTLS measures fencegate's webhook in this process the way
// the bench measures `fencegate run`: over TLS on loopback, eight kept-alive
// HTTP/1.1 connections, the bench's reviews in turn, every answer checked.
// It is what to profile when the bench's figures need explaining
// (-cpuprofile); the client shares the process, and the server's side is
// what runs under net/http.(*conn).serve.
func BenchmarkWebhookTLS(b *testing.B) {
	reviews, err := buildReviews(64)
	if err != nil {
		b.Fatal(err)
	}
	paths := map[endpoint]string{validate: webhook.PathValidate, mutate: webhook.PathMutate}
	for _, sc := range scenarios {
		b.Run(string(sc.Endpoint)+"/"+sc.State, func(b *testing.B) {
			want := testExpected(b, sc.State, reviews)[sc.Endpoint]
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			_, tlsCfg := newWebhook(b, testStates[sc.State].fence, ln)
			url := "https://" + ln.Addr().String() + paths[sc.Endpoint]
			const connections = 8
			client := newClient(target{TLS: tlsCfg}, true, connections)
			defer client.CloseIdleConnections()
			// One client goroutine per connection (RunParallel starts
			// parallelism × GOMAXPROCS of them).
			b.SetParallelism(max(connections/runtime.GOMAXPROCS(0), 1))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				chk := newChecker(sc.Endpoint, want)
				i := 0
				for pb.Next() {
					i++
					resp, err := client.Post(url, "application/json", bytes.NewReader(reviews[i%len(reviews)].Body))
					if err != nil {
						b.Error(err)
						return
					}
					body, err := io.ReadAll(resp.Body)
					_ = resp.Body.Close()
					if err != nil {
						b.Error(err)
						return
					}
					if err := chk.check(resp.StatusCode, body); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
