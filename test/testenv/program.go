package testenv

import (
	"errors"
	"fmt"
)

var errProgramFatal = errors.New("fatal")

// programT lets a program (a benchmark run with `go run`) use the helpers:
// Fatal records the error and unwinds to RunProgram.
type programT struct {
	err      error
	cleanups []func()
}

func (p *programT) Helper()           {}
func (p *programT) Cleanup(fn func()) { p.cleanups = append(p.cleanups, fn) }
func (p *programT) Fatal(a ...any) {
	p.err = errors.New(fmt.Sprint(a...))
	panic(errProgramFatal)
}
func (p *programT) Fatalf(format string, a ...any) {
	p.err = fmt.Errorf(format, a...)
	panic(errProgramFatal)
}

// RunProgram runs fn with a T for programs: a Fatal in fn returns its error,
// and the registered cleanups run last-in first-out before RunProgram returns.
func RunProgram(fn func(t T) error) (err error) {
	p := &programT{}
	defer func() {
		for i := len(p.cleanups) - 1; i >= 0; i-- {
			p.cleanups[i]()
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			if r != errProgramFatal {
				panic(r)
			}
			err = p.err
		}
	}()
	return fn(p)
}
