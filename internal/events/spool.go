package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	spoolExt     = ".json"
	tmpPrefix    = ".tmp-"
	lockName     = ".lock"
	badDir       = "bad"
	goneDir      = "gone"
	staleTmpAge  = time.Hour
	lockPollStep = 20 * time.Millisecond
)

// Spool is a durable directory of events waiting for delivery: one file
// "<ID>.json" (mode 0600) per event, written atomically (temp file, fsync,
// rename, fsync of the directory), so a crash leaves either the whole event
// or nothing but an ignored temp file. Files that do not decode are moved to
// DIR/bad/ and reported, never deleted. A Spool is safe for concurrent use by
// several goroutines and processes; Flush serialises deliveries with an
// flock on DIR/.lock.
type Spool struct {
	dir string
	// uid, gid: who files root writes here get, when chown (owner.go).
	uid, gid int
	chown    bool
}

// CorruptError reports spool files that could not be decoded and were moved
// to DIR/bad/. It is not fatal: the events returned alongside are complete.
type CorruptError struct {
	// Moved maps each original file to the path it was moved to (or to ""
	// when moving failed; the file then stays in place).
	Moved map[string]string
	// Errs holds the decode error of each file, same keys as Moved.
	Errs map[string]error
}

func (e *CorruptError) Error() string {
	names := make([]string, 0, len(e.Moved))
	for f := range e.Moved {
		names = append(names, f)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, f := range names {
		dst := e.Moved[f]
		if dst == "" {
			dst = "(could not be moved)"
		}
		parts = append(parts, fmt.Sprintf("%s (%v) -> %s", f, e.Errs[f], dst))
	}
	return "corrupt spool files set aside: " + strings.Join(parts, "; ")
}

// OpenSpool opens (creating it with mode 0700 if needed) the spool directory.
func OpenSpool(dir string) (*Spool, error) {
	if dir == "" {
		return nil, errors.New("spool directory not set")
	}
	anc := nearestExisting(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if err := giveCreated(dir, anc); err != nil {
		return nil, fmt.Errorf("spool %s: giving it to the owner of %s: %w", dir, anc, err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("spool %s: not a directory", dir)
	}
	s := &Spool{dir: dir}
	if err := s.setOwner(); err != nil {
		return nil, fmt.Errorf("spool %s: %w", dir, err)
	}
	return s, nil
}

// Dir returns the spool directory.
func (s *Spool) Dir() string { return s.dir }

// Put stores ev durably. Storing an event whose ID is already spooled
// replaces it (same event, same file).
func (s *Spool) Put(ev Event) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("spool: encode event %s: %w", ev.ID, err)
	}
	data = append(data, '\n')
	if err := writeFileAtomic(s.dir, ev.ID+spoolExt, data, s.own); err != nil {
		return fmt.Errorf("spool: event %s: %w", ev.ID, err)
	}
	return nil
}

// Pending returns the spooled events sorted by time (then ID). Temp files
// are ignored; files that do not decode are moved to DIR/bad/ and reported
// in a *CorruptError, returned together with the good events.
func (s *Spool) Pending() ([]Event, error) {
	evs, _, err := s.pending()
	return evs, err
}

// pending also returns the file of each event.
func (s *Spool) pending() ([]Event, map[string]string, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("spool: %w", err)
	}
	var (
		evs     []Event
		files   = map[string]string{}
		corrupt *CorruptError
	)
	for _, de := range entries {
		name := de.Name()
		if !de.Type().IsRegular() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, spoolExt) {
			continue
		}
		path := filepath.Join(s.dir, name)
		ev, derr := readEvent(path, strings.TrimSuffix(name, spoolExt))
		if errors.Is(derr, fs.ErrNotExist) {
			continue // delivered and removed by a concurrent flusher
		}
		if errors.Is(derr, fs.ErrPermission) {
			// Not corrupt: another user's file (root's hook before it gave
			// its files to the spool's owner). Left in place, and an error.
			return nil, nil, fmt.Errorf("spool: %w", derr)
		}
		if derr != nil {
			dst, merr := s.setAside(name, badDir)
			if errors.Is(merr, fs.ErrNotExist) {
				continue // set aside by a concurrent reader
			}
			if corrupt == nil {
				corrupt = &CorruptError{Moved: map[string]string{}, Errs: map[string]error{}}
			}
			corrupt.Errs[path] = derr
			corrupt.Moved[path] = dst
			continue
		}
		if _, dup := files[ev.ID]; dup {
			continue
		}
		files[ev.ID] = path
		evs = append(evs, ev)
	}
	sort.SliceStable(evs, func(i, j int) bool {
		if !evs[i].Time.Equal(evs[j].Time) {
			return evs[i].Time.Before(evs[j].Time)
		}
		return evs[i].ID < evs[j].ID
	})
	if corrupt != nil {
		return evs, files, corrupt
	}
	return evs, files, nil
}

func readEvent(path, wantID string) (Event, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Event{}, err
	}
	var ev Event
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&ev); err != nil {
		return Event{}, fmt.Errorf("decode: %w", err)
	}
	if dec.More() {
		return Event{}, errors.New("decode: trailing data after the event")
	}
	if err := ev.Validate(); err != nil {
		return Event{}, err
	}
	if ev.ID != wantID {
		return Event{}, fmt.Errorf("event id %q does not match the file name", ev.ID)
	}
	return ev, nil
}

// setAside moves DIR/name to DIR/sub/name (adding a suffix if taken).
func (s *Spool) setAside(name, sub string) (string, error) {
	bd := filepath.Join(s.dir, sub)
	if err := s.mkdirOwned(bd); err != nil {
		return "", err
	}
	dst := filepath.Join(bd, name)
	for i := 1; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
			break
		}
		dst = filepath.Join(bd, fmt.Sprintf("%s.%d", name, i))
	}
	if err := os.Rename(filepath.Join(s.dir, name), dst); err != nil {
		return "", err
	}
	if err := syncDir(s.dir); err != nil {
		return dst, err
	}
	return dst, syncDir(bd)
}

// Flush delivers every pending event to sink, oldest first, and removes an
// event's file only after the sink accepted it. It holds an exclusive flock
// on DIR/.lock meanwhile, so concurrent flushers (other processes) take
// turns and never deliver the same file twice; waiting for the lock honours
// ctx. It stops at the first error that wraps ErrUnavailable or when ctx is
// done; other failures (e.g. the VM does not exist) leave that event in the
// spool and go on with the next. The returned error joins every failure (a
// *CorruptError among them when files were set aside).
func (s *Spool) Flush(ctx context.Context, sink Sink) (sent int, err error) {
	if sink == nil {
		return 0, errors.New("spool flush: no sink")
	}
	unlock, err := s.lock(ctx, lockName)
	if err != nil {
		return 0, err
	}
	defer unlock()

	s.removeStaleTemps()

	evs, files, perr := s.pending()
	var errs []error
	if perr != nil {
		var ce *CorruptError
		if !errors.As(perr, &ce) {
			return 0, perr
		}
		errs = append(errs, perr)
	}
	for _, ev := range evs {
		if cerr := ctx.Err(); cerr != nil {
			errs = append(errs, fmt.Errorf("spool flush: %d event(s) left: %w", len(evs)-sent, cerr))
			break
		}
		if derr := sink.RecordEvent(ctx, ev); derr != nil {
			if errors.Is(derr, ErrGone) {
				errs = append(errs, s.setGone(filepath.Base(files[ev.ID]), ev, derr))
				continue
			}
			errs = append(errs, fmt.Errorf("event %s (vm %d): %w", ev.ID, ev.VM, derr))
			if errors.Is(derr, ErrUnavailable) || ctx.Err() != nil {
				break
			}
			continue
		}
		sent++
		if rerr := os.Remove(files[ev.ID]); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			// Delivered but still spooled: it will be offered again and the
			// sink will recognise its ID.
			errs = append(errs, fmt.Errorf("event %s delivered but not removed from the spool: %w", ev.ID, rerr))
		}
	}
	if sent > 0 {
		if serr := syncDir(s.dir); serr != nil {
			errs = append(errs, fmt.Errorf("spool: sync %s: %w", s.dir, serr))
		}
	}
	return sent, errors.Join(errs...)
}

// setGone moves the file of ev, which the sink can never record (why wraps
// ErrGone), to DIR/gone/ and returns the error that reports it: the event
// is kept there (and in the audit log) but no longer offered. The caller
// holds the spool's lock.
func (s *Spool) setGone(name string, ev Event, why error) error {
	dst, err := s.setAside(name, goneDir)
	if err != nil {
		return fmt.Errorf("event %s (vm %d): %v; and it could not be set aside (it is offered again next time): %w", ev.ID, ev.VM, why, err)
	}
	return fmt.Errorf("event %s (vm %d) can never be delivered (%w); kept in %s, not offered again", ev.ID, ev.VM, why, dst)
}

// lock takes the flock on DIR/name, polling so that ctx is honoured. The
// file is opened without following a symlink (root's hook may write into
// a directory another user owns, see own).
func (s *Spool) lock(ctx context.Context, name string) (func(), error) {
	path := filepath.Join(s.dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("spool lock: %w", err)
	}
	if err := s.own(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("spool lock %s: %w", path, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() {
				_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("spool lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("spool lock %s: another flush or collection is running: %w", path, ctx.Err())
		case <-time.After(lockPollStep):
		}
	}
}

// removeStaleTemps deletes temp files older than staleTmpAge (left by a
// crash during Put; a live Put finishes in milliseconds).
func (s *Spool) removeStaleTemps() {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return
	}
	for _, de := range entries {
		if !strings.HasPrefix(de.Name(), tmpPrefix) {
			continue
		}
		info, err := de.Info()
		if err != nil || time.Since(info.ModTime()) < staleTmpAge {
			continue
		}
		_ = os.Remove(filepath.Join(s.dir, de.Name()))
	}
}

// writeFileAtomic writes dir/name via a temp file, fsync, rename, fsync dir.
// own (may be nil) is applied to the temp file before it is written.
func writeFileAtomic(dir, name string, data []byte, own func(*os.File) error) (err error) {
	f, err := os.CreateTemp(dir, tmpPrefix+name+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(0o600); err != nil {
		return err
	}
	if own != nil {
		if err = own(f); err != nil {
			return err
		}
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
