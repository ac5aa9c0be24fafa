package cli

import "testing"

func TestIsLoopback(t *testing.T) {
	tests := map[string]bool{
		"127.0.0.1:1":   true,
		"127.1.2.3:1":   true,
		"[::1]:1":       true,
		"localhost:1":   true,
		":7443":         false,
		"0.0.0.0:7443":  false,
		"[::]:7443":     false,
		"10.0.0.1:7443": false,
		"example.com:1": false,
		"no-port":       false,
	}
	for addr, want := range tests {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
