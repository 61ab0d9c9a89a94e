package main

import (
	"testing"
	"time"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2024, 5, 10, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"", time.Time{}, false},
		{"2024-05-01T10:00:00Z", time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC), false},
		{"2024-05-01T12:00:00+02:00", time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC), false},
		{"2024-05-01", time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC), false},
		{"24h", now.Add(-24 * time.Hour), false},
		{"7d", now.Add(-7 * 24 * time.Hour), false},
		{"90m", now.Add(-90 * time.Minute), false},
		{"5", time.Time{}, true},
		{"yesterday", time.Time{}, true},
		{"-1h", time.Time{}, true},
		{"0s", time.Time{}, true},
	} {
		got, err := parseSince(tc.in, now)
		if (err != nil) != tc.err || !got.Equal(tc.want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}
