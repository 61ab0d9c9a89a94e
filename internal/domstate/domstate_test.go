package domstate

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	exit1 := exec.Command("false").Run()
	for _, tc := range []struct {
		name, stdout, stderr string
		err                  error
		want                 State
		active, bad          bool
	}{
		{name: "running", stdout: "running\n\n", want: "running", active: true},
		{name: "paused", stdout: "paused\n", want: "paused", active: true},
		{name: "in shutdown", stdout: "in shutdown\n", want: "in shutdown", active: true},
		{name: "pmsuspended", stdout: "pmsuspended\n", want: "pmsuspended", active: true},
		{name: "shut off", stdout: "shut off\n", want: "shut off"},
		{name: "crashed", stdout: "crashed\n", want: "crashed"},
		{name: "unknown domain", stderr: "error: failed to get domain 'one-7'\n", err: exit1, want: ""},
		{name: "libvirtd down", stderr: "error: failed to connect to the hypervisor\n", err: exit1, bad: true},
		{name: "empty answer", stdout: "\n", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.stdout, tc.stderr, tc.err)
			if (err != nil) != tc.bad || got != tc.want || got.Active() != tc.active {
				t.Fatalf("Parse = %q (active %v), %v; want %q (active %v), error %v", got, got.Active(), err, tc.want, tc.active, tc.bad)
			}
		})
	}
}

// TestQueryNoLibvirt: a URI nothing answers on is an error within the
// timeout, never a hang and never "not running".
func TestQueryNoLibvirt(t *testing.T) {
	t.Setenv("LIBVIRT_DEFAULT_URI", "qemu+unix:///system?socket=/nonexistent/libvirt-sock")
	start := time.Now()
	st, err := Query(context.Background(), "one-1", 5*time.Second)
	if err == nil || st != "" {
		t.Fatalf("want an error, got %q", st)
	}
	if time.Since(start) > 6*time.Second {
		t.Fatalf("took %s", time.Since(start))
	}
}

func TestParseJob(t *testing.T) {
	exit1 := exec.Command("false").Run()
	for _, tc := range []struct {
		name, stdout, stderr string
		err                  error
		want                 Job
		idle, bad            bool
	}{
		// virsh 9.0 on a running domain with no job (virsh pads its columns)
		{name: "idle", stdout: "Job type:         None        \n\n", want: Job{Type: "None"}, idle: true},
		{name: "outgoing migration", stdout: "Job type:         Unbounded   \nOperation:        Outgoing migration\nTime elapsed:     5123         ms\nData processed:   1.011 GiB\n\n",
			want: Job{Type: "Unbounded", Operation: "Outgoing migration"}},
		{name: "bounded", stdout: "Job type:         Bounded     \nOperation:        Outgoing migration\nTime remaining:   2000         ms\n", want: Job{Type: "Bounded", Operation: "Outgoing migration"}},
		{name: "unknown domain", stderr: "error: failed to get domain 'one-7'\n", err: exit1, want: Job{}},
		{name: "not running", stderr: "error: Requested operation is not valid: domain is not running\n", err: exit1, bad: true},
		// libvirt's test driver (test:///default) has no job information
		{name: "driver without jobs", stderr: "error: this function is not supported by the connection driver: virDomainGetJobInfo\n", err: exit1, bad: true},
		{name: "libvirtd down", stderr: "error: failed to connect to the hypervisor\n", err: exit1, bad: true},
		{name: "empty answer", stdout: "\n", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseJob(tc.stdout, tc.stderr, tc.err)
			if (err != nil) != tc.bad || got != tc.want || got.Idle() != tc.idle {
				t.Fatalf("ParseJob = %+v (idle %v), %v; want %+v (idle %v), error %v", got, got.Idle(), err, tc.want, tc.idle, tc.bad)
			}
		})
	}
}

// TestQueryJobNoLibvirt: no libvirt is an error within the timeout, never
// "no job".
func TestQueryJobNoLibvirt(t *testing.T) {
	t.Setenv("LIBVIRT_DEFAULT_URI", "qemu+unix:///system?socket=/nonexistent/libvirt-sock")
	start := time.Now()
	j, err := QueryJob(context.Background(), "one-1", 5*time.Second)
	if err == nil || j.Idle() {
		t.Fatalf("want an error, got %+v", j)
	}
	if time.Since(start) > 6*time.Second {
		t.Fatalf("took %s", time.Since(start))
	}
}
