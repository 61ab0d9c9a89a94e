package engine

import (
	"errors"
	"testing"
)

func TestCheckClaimFormat(t *testing.T) {
	for _, tc := range []struct {
		format, need int
		ok           bool
	}{
		{0, ClaimFormat, ClaimFormat <= 1}, // reports none: format 1
		{1, 2, false},
		{2, 2, true},
		{3, 2, true},
		{2, 3, false},
	} {
		err := CheckClaimFormat("the hook on h1", tc.format, tc.need)
		var fe *ClaimFormatError
		if (err == nil) != tc.ok || (err != nil && (!errors.As(err, &fe) || fe.Need != tc.need)) {
			t.Errorf("format %d need %d: %v", tc.format, tc.need, err)
		}
	}
	if err := CheckClaimFormat("the hook on h1", 0, 2); err == nil || err.Error() != "the hook on h1 reads claim format 1, older than claim format 2" {
		t.Errorf("%v", err)
	}
}
