// Package corpus stores the documents an agent may cite: every version of a
// named document, kept byte for byte with its sha256, on the session volume.
// Ingesting never opens the session database.
package corpus

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/affido/affido/internal/atomicfile"
)

// MaxDocument is the largest document accepted.
const MaxDocument = 1 << 20

// Errors callers branch on.
var (
	ErrBadName  = errors.New("document names are 1 to 128 characters of A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'")
	ErrBinary   = errors.New("document is not UTF-8 text")
	ErrTooLarge = fmt.Errorf("document is larger than %d bytes", MaxDocument)
	ErrNotFound = errors.New("no such document or version")
	ErrEmpty    = errors.New("document is empty")
)

var validName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)

// Version is one stored version of a document.
type Version struct {
	Doc       string    `json:"doc"`
	Version   int       `json:"version"`
	SHA256    string    `json:"sha256"`
	Size      int       `json:"size"`
	CreatedAt time.Time `json:"created_at"`
}

// Corpus is a directory of documents.
type Corpus struct {
	Dir string
	mu  sync.Mutex
}

func (c *Corpus) docDir(name string) string { return filepath.Join(c.Dir, name) }

func (c *Corpus) index(name string) ([]Version, error) {
	b, err := os.ReadFile(filepath.Join(c.docDir(name), "index.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var vs []Version
	if err := json.Unmarshal(b, &vs); err != nil {
		return nil, fmt.Errorf("read index of %s: %w", name, err)
	}
	return vs, nil
}

// Check validates a document before anything is written.
func Check(name string, data []byte) error {
	switch {
	case !validName.MatchString(name):
		return ErrBadName
	case len(data) == 0:
		return ErrEmpty
	case len(data) > MaxDocument:
		return ErrTooLarge
	case !utf8.Valid(data) || bytes.IndexByte(data, 0) >= 0:
		return ErrBinary
	}
	return nil
}

// Ingest stores data as the newest version of name. The same bytes as the
// newest version store nothing and return it; different bytes make a new
// version, and old versions stay.
func (c *Corpus) Ingest(name string, data []byte) (Version, bool, error) {
	if err := Check(name, data); err != nil {
		return Version{}, false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	vs, err := c.index(name)
	if err != nil {
		return Version{}, false, err
	}
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	if n := len(vs); n > 0 && vs[n-1].SHA256 == h {
		return vs[n-1], false, nil
	}
	v := Version{Doc: name, Version: len(vs) + 1, SHA256: h, Size: len(data), CreatedAt: time.Now().UTC()}
	if err := os.MkdirAll(c.docDir(name), 0o755); err != nil {
		return Version{}, false, err
	}
	if err := atomicfile.Write(filepath.Join(c.docDir(name), fmt.Sprintf("v%d", v.Version)), data, 0o644); err != nil {
		return Version{}, false, err
	}
	idx, _ := json.MarshalIndent(append(vs, v), "", "  ")
	if err := atomicfile.Write(filepath.Join(c.docDir(name), "index.json"), idx, 0o644); err != nil {
		return Version{}, false, err
	}
	return v, true, nil
}

// Raw returns the stored bytes of a version (0: the newest) as they are on
// disk now, with the version's record; the caller compares the hash.
func (c *Corpus) Raw(name string, version int) ([]byte, Version, error) {
	if !validName.MatchString(name) {
		return nil, Version{}, ErrBadName
	}
	c.mu.Lock()
	vs, err := c.index(name)
	c.mu.Unlock()
	if err != nil {
		return nil, Version{}, err
	}
	if version == 0 {
		version = len(vs)
	}
	if version < 1 || version > len(vs) {
		return nil, Version{}, ErrNotFound
	}
	v := vs[version-1]
	b, err := os.ReadFile(filepath.Join(c.docDir(name), fmt.Sprintf("v%d", version)))
	if err != nil {
		return nil, v, fmt.Errorf("read %s v%d: %w", name, version, err)
	}
	return b, v, nil
}

// Docs lists the newest version of every document.
func (c *Corpus) Docs() ([]Version, error) {
	ents, err := os.ReadDir(c.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Version
	for _, e := range ents {
		if !e.IsDir() || !validName.MatchString(e.Name()) {
			continue
		}
		c.mu.Lock()
		vs, err := c.index(e.Name())
		c.mu.Unlock()
		if err == nil && len(vs) > 0 {
			out = append(out, vs[len(vs)-1])
		}
	}
	return out, nil
}
