package partners

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// MaxFileSize caps a registry document read from a file, NATS or the Admin
// API.
const MaxFileSize = 16 << 20

// Parse decodes a registry from YAML (or JSON, which YAML reads) strictly,
// an unknown field being an error, and validates it.
func Parse(b []byte) (*Registry, error) {
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalid, len(b), MaxFileSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var r Registry
	if err := dec.Decode(&r); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty document", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// ParseJSON decodes a registry from JSON strictly (an unknown field, a
// document that is not an object, or anything after it is an error) and
// validates it. It is how a registry travels through NATS KV and state
// files: Parse's rules, at JSON's speed.
func ParseJSON(b []byte) (*Registry, error) {
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalid, len(b), MaxFileSize)
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("%w: not a JSON object", ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r Registry
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: data after the document", ErrInvalid)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Load reads and parses the registry file at path.
func Load(path string) (*Registry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("partners: %w", err)
	}
	r, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("partners: %s: %w", path, err)
	}
	return r, nil
}

// KeyFile is where a partner's API key is kept locally: dir/<partner>.key.
func KeyFile(dir, partnerID string) string {
	return filepath.Join(dir, partnerID+".key")
}

// WriteKeyFile writes apiKey to path with mode 0600, replacing any file
// there atomically.
func WriteKeyFile(path, apiKey string) error {
	if _, _, err := ParseKey(apiKey); err != nil {
		return errors.New("partners: write key file: not an API key")
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".key-*")
	if err != nil {
		return fmt.Errorf("partners: write key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("partners: write key file: %w", err)
	}
	if _, err := tmp.WriteString(apiKey + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("partners: write key file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("partners: write key file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("partners: write key file: %w", err)
	}
	return nil
}

// ReadKeyFile reads an API key written by WriteKeyFile. The error names
// the file, never its content.
func ReadKeyFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("partners: %w", err)
	}
	k := strings.TrimSpace(string(b))
	if _, _, err := ParseKey(k); err != nil {
		return "", fmt.Errorf("partners: %s does not hold an API key", path)
	}
	return k, nil
}

// ReadKeyDir reads every <partner>.key file of dir, by partner ID.
func ReadKeyDir(dir string) (map[string]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("partners: %w", err)
	}
	keys := map[string]string{}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".key") || strings.HasPrefix(name, ".") {
			continue
		}
		k, err := ReadKeyFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		keys[strings.TrimSuffix(name, ".key")] = k
	}
	return keys, nil
}
