package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Verifier holds the tokens of one token file and reloads them. It is safe
// for concurrent use: lookups read an atomically swapped immutable Set.
type Verifier struct {
	path string
	set  atomic.Pointer[Set]
	mu   sync.Mutex // serialises reloads
	last [sha256.Size]byte
}

// NewVerifier loads path. Unlike a reload, a first load that fails is an
// error: the daemon must not start with a token file it cannot use.
func NewVerifier(path string) (*Verifier, error) {
	v := &Verifier{path: path}
	if _, err := v.Reload(); err != nil {
		return nil, err
	}
	return v, nil
}

// Path is the token file.
func (v *Verifier) Path() string { return v.path }

// Len is the number of tokens in force.
func (v *Verifier) Len() int { return v.set.Load().Len() }

// Lookup returns presented's kind.
func (v *Verifier) Lookup(presented Token) (Kind, bool) { return v.set.Load().Lookup(presented) }

// Reload re-reads the token file. changed is true when its content differs
// from the set in force. On error the set in force is kept.
func (v *Verifier) Reload() (changed bool, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	data, err := readTokenFile(v.path)
	if err != nil {
		return false, fmt.Errorf("auth: read token file: %w", err)
	}
	sum := sha256.Sum256(data)
	if v.set.Load() != nil && bytes.Equal(sum[:], v.last[:]) {
		return false, nil
	}
	set, err := ParseTokens(data)
	if err != nil {
		return false, fmt.Errorf("auth: token file %s: %w", v.path, err)
	}
	v.set.Store(set)
	v.last = sum
	return true, nil
}

// ReloadEvent is reported after each reload attempt that changed the set or
// failed (unchanged polls are silent).
type ReloadEvent struct {
	Trigger string // "sighup" or "file_change"
	Changed bool   // a new set is in force
	Tokens  int    // tokens in force afterwards
	Err     error  // nil: the new set is in force
}

// Reload triggers.
const (
	TriggerSIGHUP     = "sighup"
	TriggerFileChange = "file_change"
)

// Watch reloads on every value from hup and every interval (<= 0: no
// polling) until ctx ends, calling report for each reload that changed
// something or failed. A failing file is reported once per distinct error,
// not on every poll.
func (v *Verifier) Watch(ctx context.Context, interval time.Duration, hup <-chan os.Signal, report func(ReloadEvent)) {
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	lastErr := ""
	for {
		trigger := ""
		select {
		case <-ctx.Done():
			return
		case <-hup:
			trigger = TriggerSIGHUP
		case <-tick:
			trigger = TriggerFileChange
		}
		changed, err := v.Reload()
		if err == nil {
			lastErr = ""
			if !changed && trigger == TriggerFileChange {
				continue // the common poll: nothing to say
			}
		} else {
			if trigger == TriggerFileChange && err.Error() == lastErr {
				continue
			}
			lastErr = err.Error()
		}
		if report != nil {
			report(ReloadEvent{Trigger: trigger, Changed: changed, Tokens: v.Len(), Err: err})
		}
	}
}
