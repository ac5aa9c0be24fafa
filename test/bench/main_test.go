package main

import (
	"testing"
	"time"
)

func TestOptionsAreChecked(t *testing.T) {
	good := options{rounds: 3, connections: 8, saturation: time.Second, rate: 1000, latency: time.Second, churnRate: 500, churn: time.Second, reviews: 64, retries: 1}
	tests := map[string]struct {
		edit    func(*options)
		wantErr string
	}{
		"defaults":              {edit: func(*options) {}},
		"no churn, no rate":     {edit: func(o *options) { o.churn, o.churnRate = 0, 0 }},
		"no rounds":             {edit: func(o *options) { o.rounds = 0 }, wantErr: "-rounds is 0"},
		"no connections":        {edit: func(o *options) { o.connections = -1 }, wantErr: "-connections is -1"},
		"no saturation":         {edit: func(o *options) { o.saturation = 0 }, wantErr: "must be positive"},
		"churn without a rate":  {edit: func(o *options) { o.churnRate = 0 }, wantErr: "-churn-rate is 0"},
		"negative retry budget": {edit: func(o *options) { o.retryBudget = -time.Second }, wantErr: "cannot be negative"},
		"one review":            {edit: func(o *options) { o.reviews = 1 }, wantErr: "want at least 2"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			checkErr(t, o.validate(), tc.wantErr)
		})
	}
}
