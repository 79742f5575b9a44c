package shard

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestValidateTiming: each problem is a *TimingError for the field that is wrong, and
// its Reason names the bound as its caller names it.
func TestValidateTiming(t *testing.T) {
	keys := map[string]string{"LeaseDuration": "shard.leaseDuration", "RenewDeadline": "shard.renewDeadline", "RetryPeriod": "shard.retryPeriod"}
	for _, tc := range []struct {
		name                string
		lease, renew, retry time.Duration
		want, wantByKey     []string
	}{
		{name: "the defaults", lease: DefaultLeaseDuration, renew: DefaultRenewDeadline, retry: DefaultRetryPeriod},
		{
			name: "renew deadline not shorter than the lease", lease: 15 * time.Second, renew: 15 * time.Second, retry: 2 * time.Second,
			want:      []string{"RenewDeadline: must be shorter than LeaseDuration (15s), got 15s"},
			wantByKey: []string{"shard.renewDeadline: must be shorter than shard.leaseDuration (15s), got 15s"},
		},
		{
			name: "no room for a second try", lease: 15 * time.Second, renew: 10 * time.Second, retry: 9 * time.Second,
			want:      []string{"RetryPeriod: must be shorter than RenewDeadline (10s) / 1.2, got 9s"},
			wantByKey: []string{"shard.retryPeriod: must be shorter than shard.renewDeadline (10s) / 1.2, got 9s"},
		},
		{
			name: "not positive", lease: -time.Second, renew: 0, retry: time.Second,
			want:      []string{"LeaseDuration: must be positive, got -1s", "RenewDeadline: must be positive, got 0s"},
			wantByKey: []string{"shard.leaseDuration: must be positive, got -1s", "shard.renewDeadline: must be positive, got 0s"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateTiming(tc.lease, tc.renew, tc.retry)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			var got, gotByKey []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var te *TimingError
				if !errors.As(e, &te) {
					t.Fatalf("%v is no *TimingError", e)
				}
				got = append(got, te.Error())
				gotByKey = append(gotByKey, keys[te.Field]+": "+te.Reason(func(f string) string { return keys[f] }))
				if te.Reason(func(f string) string { return f }) != te.Err.Error() {
					t.Errorf("Reason with the fields' names is %q, Err %q", te.Reason(func(f string) string { return f }), te.Err)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if !slices.Equal(gotByKey, tc.wantByKey) {
				t.Errorf("by key\n%s\nwant\n%s", strings.Join(gotByKey, "\n"), strings.Join(tc.wantByKey, "\n"))
			}
		})
	}
}
