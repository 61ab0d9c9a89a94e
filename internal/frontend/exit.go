package frontend

import (
	"errors"
	"fmt"
	"io"
)

// Exit maps a driver's error to its exit code and writes the one stderr line
// oned shows: the one switch every driver main uses. A wrapped action's own
// failure (*ExitError) keeps its code; its stderr was relayed as it came.
func Exit(err error, stderr io.Writer) int {
	var (
		fe *Error
		xe *ExitError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &xe):
		return xe.Code
	case errors.As(err, &fe):
		fmt.Fprintln(stderr, fe.Msg)
		return fe.Kind.ExitCode()
	}
	fmt.Fprintln(stderr, "rbdfence: "+err.Error())
	return ExitFailure
}
