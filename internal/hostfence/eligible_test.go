package hostfence

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/opennebula"
)

func TestEligible(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		state int
		last  time.Time
		says  string // "" = eligible
	}{
		{"error, silent", opennebula.HostError, now.Add(-10 * time.Minute), ""},
		{"offline, silent", opennebula.HostOffline, now.Add(-3 * time.Minute), ""},
		{"error, never monitored", opennebula.HostError, time.Time{}, ""},
		{"error, just at quiet", opennebula.HostError, now.Add(-DefaultQuiet), ""},
		{"monitored", opennebula.HostMonitored, now.Add(-10 * time.Minute), "its state is MONITORED"},
		{"disabled", opennebula.HostDisabled, now.Add(-10 * time.Minute), "its state is DISABLED"},
		{"init", opennebula.HostInit, time.Time{}, "its state is INIT"},
		{"old monitoring_error", opennebula.HostMonitoringError, now.Add(-10 * time.Minute), "MONITORING_ERROR"},
		{"error but reports", opennebula.HostError, now.Add(-30 * time.Second), "still reports to oned (last monitoring 30s ago"},
		{"offline but reports", opennebula.HostOffline, now.Add(-time.Second), "still reports"},
		{"unknown state", 42, time.Time{}, "STATE_42"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Eligible(&opennebula.HostInfo{ID: 7, Name: "node7", State: tc.state, LastMonitored: tc.last}, now, DefaultQuiet)
			if tc.says == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var re *RefusedError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.says) || !strings.HasPrefix(err.Error(), "host node7 (7) not fenced: ") {
				t.Fatalf("got %v, want a refusal saying %q", err, tc.says)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("refusal is not one line: %q", err)
			}
		})
	}
}
