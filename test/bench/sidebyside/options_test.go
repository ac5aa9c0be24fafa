package sidebyside

import (
	"testing"
	"time"
)

func TestOptionsAreChecked(t *testing.T) {
	good := Options{Rounds: 3, Connections: 8, Saturation: time.Second, Rate: 1000, Latency: time.Second, ChurnRate: 500, Churn: time.Second, Reviews: 64, Retries: 1}
	tests := map[string]struct {
		edit    func(*Options)
		wantErr string
	}{
		"defaults":              {edit: func(*Options) {}},
		"no churn, no rate":     {edit: func(o *Options) { o.Churn, o.ChurnRate = 0, 0 }},
		"no rounds":             {edit: func(o *Options) { o.Rounds = 0 }, wantErr: "-rounds is 0"},
		"no connections":        {edit: func(o *Options) { o.Connections = -1 }, wantErr: "-connections is -1"},
		"no saturation":         {edit: func(o *Options) { o.Saturation = 0 }, wantErr: "must be positive"},
		"churn without a rate":  {edit: func(o *Options) { o.ChurnRate = 0 }, wantErr: "-churn-rate is 0"},
		"negative retry budget": {edit: func(o *Options) { o.RetryBudget = -time.Second }, wantErr: "cannot be negative"},
		"one review":            {edit: func(o *Options) { o.Reviews = 1 }, wantErr: "want at least 2"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			checkErr(t, o.Validate(), tc.wantErr)
		})
	}
}
