// Command onedsim runs the oned stand-in of package onedsim for
// shell-driven tests. See the package documentation for the control API.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rbdfence/rbdfence/test/onedsim"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var (
		listen  = flag.String("listen", "127.0.0.1:2633", "XML-RPC address (serves /RPC2 and /control/)")
		control = flag.String("control-listen", "", "optional separate address for the control API (stays up while /RPC2 is down)")
		auth    = flag.String("auth", "oneadmin:opennebula", "the session string user:password that is accepted")
		version = flag.String("version", onedsim.DefaultVersion, "what one.system.version answers")
		vms     listFlag
	)
	flag.Var(&vms, "vm", "XML file with a <VM> or <VM_POOL> to serve (repeatable)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "onedsim: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}

	sim := onedsim.New(*auth)
	sim.SetVersion(*version)
	for _, f := range vms {
		if err := sim.LoadFile(f); err != nil {
			fmt.Fprintln(os.Stderr, "onedsim:", err)
			os.Exit(1)
		}
	}
	if err := sim.Start(*listen); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *control != "" {
		ln, err := net.Listen("tcp", *control)
		if err != nil {
			fmt.Fprintln(os.Stderr, "onedsim: control:", err)
			os.Exit(1)
		}
		srv := &http.Server{Handler: sim.ControlHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		fmt.Printf("onedsim: control API on http://%s/control/\n", ln.Addr())
	}
	fmt.Printf("onedsim: listening on %s\n", sim.URL())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	_ = sim.Close()
}
