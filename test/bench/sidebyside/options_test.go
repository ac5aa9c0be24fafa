package sidebyside

import (
	"flag"
	"io"
	"slices"
	"testing"
	"time"
)

func TestOptionsAreChecked(t *testing.T) {
	good := Options{Rounds: 3, Connections: 8, Saturation: time.Second, Rate: 1000, Latency: time.Second, ChurnRate: 500, Churn: time.Second, Reviews: 64, Retries: 1, LogFormat: "json"}
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
		"a curve":               {edit: func(o *Options) { o.Rates, o.CurveDuration = []int{250, 500}, time.Second }},
		"a curve of no length":  {edit: func(o *Options) { o.Rates = []int{250} }, wantErr: "-rates-duration 0s must be positive"},
		"console logs":          {edit: func(o *Options) { o.LogFormat = "console" }},
		"an unknown log format": {edit: func(o *Options) { o.LogFormat = "text" }, wantErr: `-log-format "text": want json or console`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := good
			tc.edit(&o)
			checkErr(t, o.Validate(), tc.wantErr)
		})
	}
}

func TestRatesFlag(t *testing.T) {
	tests := map[string]struct {
		value   string
		want    []int
		wantErr string
	}{
		"four rates":    {value: "250,500,1000,2000", want: []int{250, 500, 1000, 2000}},
		"spaces":        {value: " 250, 500 ", want: []int{250, 500}},
		"none":          {value: "", want: nil},
		"not a number":  {value: "250,fast", wantErr: `rate "fast"`},
		"not positive":  {value: "0", wantErr: `rate "0"`},
		"negative rate": {value: "-5", wantErr: `rate "-5"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var o Options
			fs := flag.NewFlagSet("bench", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.AddFlags(fs)
			err := fs.Parse([]string{"-rates", tc.value})
			checkErr(t, err, tc.wantErr)
			if tc.wantErr == "" && !slices.Equal(o.Rates, tc.want) {
				t.Errorf("-rates %q = %v, want %v", tc.value, o.Rates, tc.want)
			}
		})
	}
}
