package ceph

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
)

// maxKeyFile bounds what KeySource reads: keyrings are small.
const maxKeyFile = 64 << 10

// KeySource tells which librados option reads the secret at path:
// "keyfile" for a bare base64 key (one word, what `ceph auth get-key`
// prints and what OpenNebula's CEPH_KEY names: its scripts pass it to
// `rbd --keyfile`, src/tm_mad/ceph/clone:109 and
// src/datastore_mad/remotes/ceph/cp:101, and to qemu-img as keyfile=,
// src/tm_mad/ceph/mkimage:111, all of release-7.4.0), or "keyring" for a
// keyring (a "[client.x]" section line and a "key = ..." line). The two
// cannot be mistaken: a bare key has no '[' and no '='-separated words,
// base64 padding aside. Anything else is an error naming the file, never
// its content.
func KeySource(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("key file %s: %w", path, unwrapPath(err))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return "", fmt.Errorf("key file %s: %w", path, unwrapPath(err))
	}
	if len(b) > maxKeyFile {
		return "", fmt.Errorf("key file %s is larger than %d bytes: neither a key file nor a keyring", path, maxKeyFile)
	}
	return classifyKey(path, b)
}

func classifyKey(path string, b []byte) (string, error) {
	t := bytes.TrimSpace(b)
	if len(t) > 0 && len(bytes.Fields(t)) == 1 {
		if k, err := base64.StdEncoding.DecodeString(string(t)); err == nil && len(k) > 0 {
			return "keyfile", nil
		}
	}
	hasSection, hasKey := false, false
	for _, line := range bytes.Split(t, []byte("\n")) {
		line = bytes.TrimSpace(line)
		switch {
		case bytes.HasPrefix(line, []byte("[")) && bytes.HasSuffix(line, []byte("]")):
			hasSection = true
		case bytes.HasPrefix(line, []byte("key")):
			k, _, ok := bytes.Cut(line, []byte("="))
			if ok && string(bytes.TrimSpace(k)) == "key" {
				hasKey = true
			}
		}
	}
	if hasSection && hasKey {
		return "keyring", nil
	}
	return "", fmt.Errorf("%s is neither a key file (one base64 key, as `ceph auth get-key client.<user>` prints) nor a keyring ([client.<user>] and key = ...); check CEPH_KEY of the datastore or ceph.keyring", path)
}

// unwrapPath drops the *PathError wrapper (its path is already named).
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
