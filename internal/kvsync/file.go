package kvsync

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// fileFormat is the state file's content. Doc is the document as the
// Target encodes it (JSON for both GTR documents, so the file reads as one
// JSON object).
type fileFormat struct {
	Revision uint64          `json:"revision"`
	Replica  string          `json:"replica,omitempty"`
	SavedAt  time.Time       `json:"saved_at"`
	Doc      json.RawMessage `json:"doc"`
}

// loadInitial applies the state file, else the seed. r.mu need not be held:
// nothing else runs yet.
func (r *Replica[D]) loadInitial() error {
	if r.cfg.StateFile != "" {
		err := r.loadFile()
		if err == nil {
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			r.cfg.Log.Error("state file unusable; starting from the config file", "path", r.cfg.StateFile, "err", err)
		}
	}
	d, err := r.cfg.Seed()
	if err != nil {
		return fmt.Errorf("kvsync: %s: seed: %w", r.cfg.What, err)
	}
	if err := r.cfg.Target.Apply(d, 0); err != nil {
		return fmt.Errorf("kvsync: %s: seed: %w", r.cfg.What, err)
	}
	return nil
}

func (r *Replica[D]) loadFile() error {
	b, err := os.ReadFile(r.cfg.StateFile)
	if err != nil {
		return err
	}
	var f fileFormat
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	d, err := r.cfg.Target.Decode(f.Doc)
	if err != nil {
		return err
	}
	if err := r.cfg.Target.Apply(d, f.Revision); err != nil {
		return err
	}
	r.rev = f.Revision
	r.cfg.Log.Info("serving from the last-known state file", "path", r.cfg.StateFile,
		r.logVersion(d), "revision", f.Revision, "saved_at", f.SavedAt)
	return nil
}

// save writes the state file atomically (write, sync, rename), readable by
// its owner only: a document may hold secrets (callback signing secrets).
// r.mu held.
func (r *Replica[D]) save(d D, rev uint64) {
	if r.cfg.StateFile == "" {
		return
	}
	doc, err := r.cfg.Target.Encode(d)
	if err == nil {
		var b []byte
		b, err = json.MarshalIndent(fileFormat{Revision: rev, Replica: r.cfg.ReplicaID, SavedAt: time.Now().UTC(), Doc: doc}, "", "  ")
		if err == nil {
			err = writeFileAtomic(r.cfg.StateFile, b)
		}
	}
	if err != nil {
		r.cfg.Log.Error("writing the state file", "path", r.cfg.StateFile, "err", err)
	}
}

// writeFileAtomic replaces path with b. os.CreateTemp makes the file 0600,
// and the rename keeps that mode.
func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename this finds nothing
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
