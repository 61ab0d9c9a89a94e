package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/rbdfence/rbdfence/internal/config"
)

// checkHostSpool: a KVM host holds no oned credentials; the hook's events
// wait in the spool until the front-end collects them over ssh (`rbdfence
// events flush`, its rbdfence-events.timer). Informational: missing oned
// credentials are the expected state of a host, never a failure; only a
// spool that cannot be read is (the collector could not read it either).
// frontendToo: this machine is also the front-end, whose credentials the
// hook may use.
func checkHostSpool(cfg *config.Config, frontendToo bool) Result {
	r := Result{Check: "events-spool", OK: true}
	entries, err := os.ReadDir(cfg.SpoolDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.Detail = "no spool yet (" + cfg.SpoolDir + "): no event waiting"
	case err != nil:
		r.OK = false
		r.Detail = oneLine(err.Error())
		r.Fix = fmt.Sprintf("make %s readable by oneadmin (the front-end collects it over ssh as oneadmin)", cfg.SpoolDir)
		return r
	default:
		n := 0
		var foreign []string
		uid, collector := collectorUID()
		if collector && ownerUID(cfg.SpoolDir) != uid {
			foreign = append(foreign, cfg.SpoolDir)
		}
		for _, e := range entries {
			if e.Type().IsRegular() && filepath.Ext(e.Name()) == ".json" && e.Name()[0] != '.' {
				n++
				if p := filepath.Join(cfg.SpoolDir, e.Name()); collector && ownerUID(p) != uid {
					foreign = append(foreign, p)
				}
			}
		}
		if len(foreign) > 0 {
			r.OK = false
			r.Detail = fmt.Sprintf("%d path(s) of the spool not owned by oneadmin, which the front-end's collection logs in as (first: %s)", len(foreign), foreign[0])
			r.Fix = "run 'chown -R oneadmin: " + cfg.SpoolDir + "' (a hook of an older rbdfence wrote them as root)"
			return r
		}
		r.Detail = fmt.Sprintf("%d event(s) waiting in %s for the front-end to collect ('rbdfence events flush' there, rbdfence-events.timer)", n, cfg.SpoolDir)
	}
	if _, err := os.Stat(cfg.OpenNebula.AuthFile); err == nil && !frontendToo {
		r.Detail += fmt.Sprintf("; this host holds oned credentials (%s): its hook delivers directly, which is discouraged (docs/SECURITY.md: a host needs none)", cfg.OpenNebula.AuthFile)
	} else if !frontendToo {
		r.Detail += "; no oned credentials here, as it should be"
	}
	return r
}

// collectorUID is the uid of oneadmin, as whom the front-end collects the
// spool over ssh; ok is false where there is no such user (not an
// OpenNebula host).
var collectorUID = func() (uid int, ok bool) {
	u, err := user.Lookup("oneadmin")
	if err != nil {
		return 0, false
	}
	id, err := strconv.Atoi(u.Uid)
	return id, err == nil
}

func ownerUID(p string) int {
	st, err := os.Lstat(p)
	if err != nil {
		return -1
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid)
	}
	return -1
}
