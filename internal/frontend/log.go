package frontend

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// Log writes OpenNebula driver log lines on stderr: "INFO: <vmid> rbdfence:
// msg" and "ERROR: <vmid> rbdfence: msg". The 7.x driver files such a line
// in that VM's log (DriverExecHelper.rb:175-196 of release-7.4.0); the 6.x
// driver drops the stderr of a successful action and puts all of a failed
// one's stderr in the VM log and the ERROR text (CommandManager.rb:76-79,
// 97-101 of release-6.10.5). The user-template event is the record on
// both. Messages are flattened to one line; the line names the VM and
// rbdfence already, so a leading "VM <vmid>: " or "rbdfence " of the
// message (a nested *Error's) is dropped.
type Log struct {
	mu sync.Mutex
	w  io.Writer
	vm int
}

// NewLog returns a log writing to w for VM vm (-1: not known yet).
func NewLog(w io.Writer, vm int) *Log {
	if w == nil {
		w = io.Discard
	}
	return &Log{w: w, vm: vm}
}

// SetVM sets the VM id the lines carry.
func (l *Log) SetVM(vm int) {
	l.mu.Lock()
	l.vm = vm
	l.mu.Unlock()
}

// Info logs a progress line.
func (l *Log) Info(format string, a ...any) { l.line("INFO", format, a...) }

// Error logs a problem that does not by itself stop the action.
func (l *Log) Error(format string, a ...any) { l.line("ERROR", format, a...) }

func (l *Log) line(level, format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prefix := level + ": "
	msg := oneLine(fmt.Sprintf(format, a...))
	if l.vm >= 0 {
		prefix += strconv.Itoa(l.vm) + " "
		msg = trimVMPrefix(l.vm, msg)
	}
	msg = strings.TrimPrefix(msg, "rbdfence ")
	_, _ = fmt.Fprintln(l.w, prefix+"rbdfence: "+msg)
}
