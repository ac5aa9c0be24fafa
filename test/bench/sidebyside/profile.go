package sidebyside

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"time"
)

// startProfile starts taking the CPU profile Options.CPUProfile asks for,
// when this is the run it is taken of: fencegate's first validate (active)
// saturation run. The profile lasts as long as the run; the function it
// returns waits for it and writes it.
func (b *bench) startProfile(round int, name string, sc scenario, attempt int, t target) func() error {
	if b.o.CPUProfile == "" || round != 1 || attempt != 1 || name != fencegateServer || sc != (scenario{validate, stateActive}) {
		return func() error { return nil }
	}
	if t.Pprof == "" {
		return func() error { return fmt.Errorf("CPU profile: fencegate serves no profiles") }
	}
	seconds := int(math.Ceil(b.o.Saturation.Seconds()))
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", t.Pprof, seconds)
	done := make(chan error, 1)
	go func() { done <- fetchProfile(url, b.o.CPUProfile, time.Duration(seconds+30)*time.Second) }()
	return func() error {
		if err := <-done; err != nil {
			return fmt.Errorf("CPU profile of fencegate: %w", err)
		}
		b.say("    CPU profile of fencegate during this run: %s (go tool pprof -top %s)", b.o.CPUProfile, b.o.CPUProfile)
		return nil
	}
}

// fetchProfile gets a profile from url into file.
func fetchProfile(url, file string, timeout time.Duration) error {
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	return f.Close()
}
