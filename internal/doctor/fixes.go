package doctor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/frontend"
	"github.com/rbdfence/rbdfence/internal/hostversions"
)

// The fixes doctor prints are the installer's own steps, with the full
// path of the installer that put this installation in place: in one place
// so that they change with the installer.

// PackagedInstaller is where packages before issue 20 item 5 put
// install.sh (an upgraded machine may still have it).
const PackagedInstaller = "/usr/lib/rbdfence/install.sh"

// PackagedOnedConf is the rbdfence-frontend package's script for the one
// oned.conf change; where it is, the packages own every other file.
const PackagedOnedConf = "/usr/sbin/rbdfence-onedconf"

// PackagedHook is the hook binary of the rbdfence-host package, which its
// post-install passes to install.sh host.
const PackagedHook = "/usr/lib/rbdfence/bin/rbdfence-hook"

// Installer returns the install.sh beside the binary exe (a checkout's
// bin/../install.sh, the package's /usr/lib/rbdfence/bin/../install.sh),
// else the package's under root, else "" (Options.Installer).
func Installer(root, exe string) string {
	if exe != "" {
		if p := filepath.Join(filepath.Dir(filepath.Dir(exe)), "install.sh"); hostversions.Executable(p) == nil {
			return p
		}
	}
	if p := filepath.Join(root, PackagedInstaller); hostversions.Executable(p) == nil {
		return PackagedInstaller
	}
	return ""
}

// fixes holds the installer's steps for one doctor run.
type fixes struct {
	installer  string // full path; "" unknown
	packaged   bool   // the packages own the files: PackagedOnedConf is there
	prefix     string // " --prefix ROOT" for a --root other than /
	configPath string
}

func newFixes(o Options) fixes {
	f := fixes{installer: o.Installer, configPath: o.ConfigPath}
	if f.installer == "" {
		f.installer = Installer(o.Root, "")
	}
	f.packaged = (f.installer == "" || f.installer == PackagedInstaller) && hostversions.Executable(filepath.Join(o.Root, PackagedOnedConf)) == nil
	if r := filepath.Clean(o.Root); o.Root != "" && r != "/" {
		f.prefix = " --prefix " + r
	}
	return f
}

// run is the installer command of part with args.
func (f fixes) run(part string, args ...string) string {
	inst, where := f.installer, ""
	if inst == "" {
		inst, where = "./install.sh", " from the rbdfence source tree after 'make build'"
	}
	cmd := inst + " " + part + f.prefix
	if part == "host" && inst == PackagedInstaller {
		cmd += " --hook-bin " + PackagedHook // as the rbdfence-host package runs it
	}
	if len(args) > 0 {
		cmd += " " + strings.Join(args, " ")
	}
	return "run '" + cmd + "'" + where
}

func (f fixes) config() string {
	return "correct the key named in the message in " + f.configPath + " (docs/CONFIGURATION.md)"
}

func (f fixes) cephConnect() string {
	return "set ceph.mon_host, ceph.user and ceph.keyring in " + f.configPath +
		" (a disk's CEPH_HOST, CEPH_USER, CEPH_KEY win); the monitors must be reachable from here"
}

// cephCaps is the documented caps, as client.admin grants them.
func (f fixes) cephCaps(cfg *config.Config, pool string) string {
	return fmt.Sprintf("as client.admin run 'ceph auth caps client.%s mon \"profile rbd\" osd \"profile rbd pool=%s\"'", cfg.Ceph.User, pool)
}

// reinstall is the package manager's command that puts pkg's files back.
func (f fixes) reinstall(pkg string) string {
	return "reinstall the " + pkg + " package ('apt install --reinstall " + pkg + "', or 'dnf reinstall " + pkg + "')"
}

func (f fixes) hook() string {
	if f.packaged {
		return f.reinstall("rbdfence-host") + " on this host, then 'systemctl restart libvirtd' once if libvirtd started before any qemu hook existed"
	}
	return f.run("host") + " on this host (it installs /" + hostversions.Wrapper +
		"), then 'systemctl restart libvirtd' once if libvirtd started before any qemu hook existed"
}

func (f fixes) wrappers() string {
	if f.packaged {
		return f.reinstall("rbdfence-frontend") + ", then 'onehost sync --force' as oneadmin"
	}
	return f.run("frontend") + ", then 'onehost sync --force' as oneadmin"
}

func (f fixes) tmCeph() string {
	if f.packaged {
		return f.reinstall("rbdfence-frontend") + ": it puts OpenNebula's scripts back"
	}
	return f.run("frontend") + ": it puts OpenNebula's scripts back"
}

// localActions is the VM_MAD change the installer makes.
var localActions = "-l deploy=" + frontend.DeployAction + ",restore=" + frontend.RestoreAction +
	",migrate=" + frontend.MigrateAction + ",attach_disk=" + frontend.AttachAction

func (f fixes) vmMAD(onedConf string) string {
	apply := f.run("frontend", "--apply")
	if f.packaged {
		apply = "run '" + PackagedOnedConf + f.prefix + " --apply'"
	}
	return fmt.Sprintf("%s (or add '%s' to the last -l of the ARGUMENTS of each such VM_MAD in %s), then 'systemctl restart opennebula'",
		apply, localActions, onedConf)
}

func (f fixes) migrateScript() string {
	if f.packaged {
		return f.reinstall("rbdfence-frontend") + " (it installs <script>-rbdfence for a wrapped local migrate script), or restore the script"
	}
	return f.run("frontend") + " (it installs <script>-rbdfence for a wrapped local migrate script), or restore the script"
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
