package events

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Spool files and directories that root writes are given to the owner of
// the spool directory. The libvirt hook runs as root, while the front-end's
// collector reaches the host over ssh as oneadmin (OpenNebula's own trust:
// the front-end logs in to hosts, never the reverse) and must be able to
// read and remove them. A directory root creates for the spool takes the
// owner of its nearest existing ancestor (/var/lib/one, oneadmin's home on
// an OpenNebula host). A spool directory owned by root stays root's alone.

// nearestExisting returns the longest existing prefix of dir (dir itself
// when it exists).
func nearestExisting(dir string) string {
	p := filepath.Clean(dir)
	for {
		if _, err := os.Lstat(p); err == nil {
			return p
		}
		up := filepath.Dir(p)
		if up == p {
			return p
		}
		p = up
	}
}

// giveCreated hands the directories from dir up to (not including) anc,
// which MkdirAll has just created, to anc's owner when root runs this and
// anc is not root's.
func giveCreated(dir, anc string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid, err := ownerOf(anc)
	if err != nil || uid == 0 {
		return err
	}
	for p := filepath.Clean(dir); p != anc && p != filepath.Dir(p); p = filepath.Dir(p) {
		if err := os.Lchown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

func ownerOf(p string) (uid, gid int, err error) {
	st, err := os.Lstat(p)
	if err != nil {
		return 0, 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, errors.New("no owner information for " + p)
	}
	return int(sys.Uid), int(sys.Gid), nil
}

// setOwner records who files written by root get: the spool directory's
// owner, when root runs this and the directory is not root's.
func (s *Spool) setOwner() error {
	if os.Geteuid() != 0 {
		return nil
	}
	uid, gid, err := ownerOf(s.dir)
	if err != nil {
		return err
	}
	if uid != 0 {
		s.uid, s.gid, s.chown = uid, gid, true
	}
	return nil
}

// own gives f to the spool directory's owner (see setOwner); a no-op
// unless root writes into a spool another user owns.
func (s *Spool) own(f *os.File) error {
	if !s.chown {
		return nil
	}
	return f.Chown(s.uid, s.gid)
}

// mkdirOwned creates the directory p (mode 0700) if needed and gives a new
// one to the spool directory's owner.
func (s *Spool) mkdirOwned(p string) error {
	err := os.Mkdir(p, 0o700)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil || !s.chown {
		return err
	}
	return os.Lchown(p, s.uid, s.gid)
}
