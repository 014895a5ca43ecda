package tlsmat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/infergate/infergate/atomicfile"
	"github.com/infergate/infergate/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// DefaultHostname labels the VIP default certificate (hostname "") in
// metrics, status and the SNI list.
const DefaultHostname = "default"

// Store is the SNI certificate store: one entry per hostname, loaded from
// its directory, shared by every rule and listener that names it, and
// reloaded when its files change. Safe for concurrent use.
type Store struct {
	opts Options
	m    *metrics.TLS
	log  logrus.FieldLogger
	now  func() time.Time

	mu      sync.Mutex
	entries map[string]*entry
	watches []*fileWatch // client CA/CRL files of sites (watch.go)
	stop    chan struct{}
	done    chan struct{}
}

// entry is one hostname's certificate. cur is read on every handshake.
type entry struct {
	hostname   string
	dir        string
	registered bool // POSTed through the SNI API (persisted)
	refs       int  // sites using it (rules)
	cur        atomic.Pointer[Cert]
	failed     fileStamp // last stamp that failed to load: not retried until it changes
	hasFailed  bool
	pending    fileStamp // changed stamp seen on the last poll, loaded once it holds for a poll
	hasPending bool
}

// Handle is a counted reference to a hostname's certificate.
type Handle struct {
	s *Store
	e *entry
}

// Cert is the certificate serving now (never nil).
func (h *Handle) Cert() *Cert { return h.e.cur.Load() }

// Release drops the reference; an unregistered entry with no users is
// forgotten (its files are read again the next time a rule names it).
func (h *Handle) Release() {
	if h == nil || h.s == nil {
		return
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.e.refs--
	if h.e.refs <= 0 && !h.e.registered {
		delete(h.s.entries, h.e.hostname)
		h.s.m.CertExpiry.DeleteLabelValues(label(h.e.hostname))
	}
	h.s = nil
}

// NewStore builds a store and loads the persisted SNI registrations (one
// that no longer loads is logged and skipped: boot must not fail on it).
func NewStore(opts Options, m *metrics.TLS, log logrus.FieldLogger) *Store {
	d := DefaultOptions()
	if opts.ReloadInterval <= 0 {
		opts.ReloadInterval = d.ReloadInterval
	}
	if opts.ExpiryRefresh <= 0 {
		opts.ExpiryRefresh = d.ExpiryRefresh
	}
	if m == nil {
		m = metrics.NewTLS(prometheus.NewRegistry())
	}
	if log == nil {
		l := logrus.New()
		l.SetOutput(nopWriter{})
		log = l
	}
	s := &Store{opts: opts, m: m, log: log, now: time.Now, entries: map[string]*entry{}}
	for _, r := range s.readState() {
		if err := s.Register(r.Hostname, r.CertPath); err != nil {
			s.log.WithError(err).WithField("hostname", r.Hostname).Warn("tls: persisted SNI certificate does not load; skipped")
		}
	}
	return s
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// CertRoot is the LoxiLB certificate root in use.
func (s *Store) CertRoot() string { return s.opts.CertRoot }

// DirFor is where hostname's files live unless registered elsewhere.
func (s *Store) DirFor(hostname string) string {
	if hostname == "" {
		return s.opts.CertRoot
	}
	return filepath.Join(s.opts.CertRoot, hostname)
}

// CheckHostname refuses names that cannot be a directory under the root.
func CheckHostname(h string) string {
	switch {
	case h == "":
		return "hostname is required"
	case len(h) > 253:
		return "hostname is longer than 253 characters"
	case h == "." || h == ".." || strings.ContainsAny(h, "/\\\x00") || strings.HasPrefix(h, "."):
		return "hostname must be a DNS name (no path separators)"
	}
	return ""
}

// Acquire returns a counted handle on hostname's certificate ("" = the VIP
// default), loading it on first use. A load failure is a *MaterialError and
// leaves nothing behind.
func (s *Store) Acquire(hostname string) (*Handle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[hostname]
	if e == nil {
		if hostname != "" {
			if reason := CheckHostname(hostname); reason != "" {
				return nil, &MaterialError{Hostname: hostname, Reason: reason}
			}
		}
		if s.opts.CertRoot == "" {
			return nil, &MaterialError{Hostname: hostname, Reason: "no certificate root is configured (infergate serve --cert-root)"}
		}
		c, err := LoadPair(hostname, s.DirFor(hostname), s.now())
		if err != nil {
			return nil, err
		}
		e = &entry{hostname: hostname, dir: c.Dir}
		e.cur.Store(c)
		s.entries[hostname] = e
		s.setExpiry(e)
	}
	e.refs++
	return &Handle{s: s, e: e}, nil
}

// Register adds (or re-points) hostname to certPath ("" = the root layout)
// after loading it; the registration is persisted.
func (s *Store) Register(hostname, certPath string) error {
	if reason := CheckHostname(hostname); reason != "" {
		return &MaterialError{Hostname: hostname, Reason: reason}
	}
	dir := certPath
	if dir == "" {
		dir = s.DirFor(hostname)
	}
	c, err := LoadPair(hostname, dir, s.now())
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[hostname]
	if e == nil {
		e = &entry{hostname: hostname}
		s.entries[hostname] = e
	}
	e.dir, e.registered, e.hasFailed = dir, true, false
	e.cur.Store(c)
	s.setExpiry(e)
	return s.writeStateLocked()
}

// ErrInUse is returned by Unregister for a hostname rules still use.
var ErrInUse = errors.New("certificate is in use by rules")

// ErrNotRegistered is returned by Unregister for an unknown hostname.
var ErrNotRegistered = errors.New("hostname is not in the SNI store")

// Unregister removes a registered hostname no rule uses.
func (s *Store) Unregister(hostname string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[hostname]
	if e == nil || !e.registered {
		return ErrNotRegistered
	}
	if e.refs > 0 {
		return fmt.Errorf("%w (%d)", ErrInUse, e.refs)
	}
	delete(s.entries, hostname)
	s.m.CertExpiry.DeleteLabelValues(label(hostname))
	return s.writeStateLocked()
}

// Info is one row of the SNI list and of /status (never key material).
type Info struct {
	Hostname  string    `json:"hostname"`
	CertPath  string    `json:"certPath"`
	RefCount  int       `json:"refCount"`
	Subject   string    `json:"subject,omitempty"`
	Issuer    string    `json:"issuer,omitempty"`
	Serial    string    `json:"serial,omitempty"`
	DNSNames  []string  `json:"dnsNames,omitempty"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
	// ExpiresInSec is seconds until NotAfter at the time of the call.
	ExpiresInSec int64 `json:"expiresInSec"`
}

// List describes every certificate loaded, sorted by hostname.
func (s *Store) List() []Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]Info, 0, len(s.entries))
	for _, e := range s.entries {
		c := e.cur.Load()
		out = append(out, Info{
			Hostname: label(e.hostname), CertPath: e.dir, RefCount: e.refs,
			Subject: c.Leaf.Subject.CommonName, Issuer: c.Leaf.Issuer.CommonName,
			Serial: c.Leaf.SerialNumber.String(), DNSNames: c.Leaf.DNSNames,
			NotBefore: c.Leaf.NotBefore, NotAfter: c.Leaf.NotAfter,
			ExpiresInSec: int64(c.Leaf.NotAfter.Sub(now) / time.Second),
		})
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Hostname, b.Hostname) })
	return out
}

// Start runs the reload watcher until Close.
func (s *Store) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		return
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.watch(s.stop, s.done)
}

// Close stops the watcher.
func (s *Store) Close() {
	s.mu.Lock()
	stop, done := s.stop, s.done
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

func (s *Store) watch(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(s.opts.ReloadInterval)
	defer t.Stop()
	lastExpiry := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		s.ReloadChanged(context.Background())
		if time.Since(lastExpiry) >= s.opts.ExpiryRefresh {
			lastExpiry = time.Now()
			s.mu.Lock()
			for _, e := range s.entries {
				s.setExpiry(e)
			}
			s.mu.Unlock()
		}
	}
}

// ReloadChanged reloads every certificate whose files changed since it was
// loaded, and every site's client CA/CRL. A new version that does not load
// keeps the old one, is logged and counted once per change. Tests call it
// directly; calls must not overlap (the watcher is the only other caller).
func (s *Store) ReloadChanged(context.Context) {
	s.mu.Lock()
	watches := append([]*fileWatch(nil), s.watches...)
	s.mu.Unlock()
	for _, w := range watches {
		w.check()
	}
	s.mu.Lock()
	list := make([]*entry, 0, len(s.entries))
	for _, e := range s.entries {
		list = append(list, e)
	}
	s.mu.Unlock()
	for _, e := range list {
		st := stampOf(e.dir)
		cur := e.cur.Load()
		s.mu.Lock()
		switch {
		case st == cur.stamp || (e.hasFailed && st == e.failed):
			e.hasPending = false
			s.mu.Unlock()
			continue
		case !e.hasPending || e.pending != st:
			// Files still moving (a rotation writes two files): wait until
			// they hold still for one poll, so a key written after its
			// certificate is not reported as a mismatched pair.
			e.pending, e.hasPending = st, true
			s.mu.Unlock()
			continue
		}
		e.hasPending = false
		s.mu.Unlock()
		c, err := LoadPair(e.hostname, e.dir, s.now())
		s.mu.Lock()
		if err != nil {
			e.failed, e.hasFailed = st, true
			s.mu.Unlock()
			s.m.ReloadFailures.WithLabelValues(label(e.hostname)).Inc()
			s.log.WithFields(logrus.Fields{"hostname": label(e.hostname), "error": err.Error()}).
				Warn("tls: changed certificate files do not load; the previous certificate keeps serving")
			continue
		}
		e.hasFailed = false
		e.cur.Store(c)
		s.setExpiry(e)
		s.mu.Unlock()
		s.m.Reloads.WithLabelValues(label(e.hostname)).Inc()
		s.log.WithFields(logrus.Fields{"hostname": label(e.hostname), "cert": describeLeaf(c.Leaf),
			"not_after": c.Leaf.NotAfter.UTC().Format(time.RFC3339)}).Info("tls: certificate reloaded")
	}
}

func (s *Store) setExpiry(e *entry) {
	c := e.cur.Load()
	s.m.CertExpiry.WithLabelValues(label(e.hostname)).Set(c.Leaf.NotAfter.Sub(s.now()).Seconds())
}

func label(hostname string) string {
	if hostname == "" {
		return DefaultHostname
	}
	return hostname
}

// registration is one persisted SNI API entry.
type registration struct {
	Hostname string `json:"hostname"`
	CertPath string `json:"certPath"`
}

func (s *Store) readState() []registration {
	if s.opts.StateFile == "" {
		return nil
	}
	data, err := os.ReadFile(s.opts.StateFile)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.WithError(err).Warn("tls: cannot read the SNI registrations")
		}
		return nil
	}
	var regs []registration
	if err := json.Unmarshal(data, &regs); err != nil {
		s.log.WithError(err).Warn("tls: SNI registrations file does not parse; ignored")
		return nil
	}
	return regs
}

func (s *Store) writeStateLocked() error {
	if s.opts.StateFile == "" {
		return nil
	}
	var regs []registration
	for _, e := range s.entries {
		if e.registered {
			regs = append(regs, registration{Hostname: e.hostname, CertPath: e.dir})
		}
	}
	slices.SortFunc(regs, func(a, b registration) int { return strings.Compare(a.Hostname, b.Hostname) })
	data, err := json.MarshalIndent(regs, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.opts.StateFile, data, 0o600); err != nil {
		return fmt.Errorf("tls: persist SNI registrations: %w", err)
	}
	return nil
}
