package tlsmat

import (
	"os"
	"strings"

	"github.com/sirupsen/logrus"
)

// fileWatch reloads a site's client CA / CRL when their files change: a
// CRL that is only read at install would let a revoked client in until the
// rule is re-POSTed. A new version that does not load keeps the old trust
// and is counted like a certificate reload failure.
type fileWatch struct {
	s      *Store
	files  []string
	reload func() error
	stamp  []fileVersion
	failed []fileVersion
}

type fileVersion struct{ mod, size int64 }

func versionsOf(files []string) []fileVersion {
	out := make([]fileVersion, len(files))
	for i, f := range files {
		if fi, err := os.Stat(f); err == nil {
			out[i] = fileVersion{fi.ModTime().UnixNano(), fi.Size()}
		} else {
			out[i] = fileVersion{-1, -1}
		}
	}
	return out
}

func sameVersions(a, b []fileVersion) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// watchFiles registers files to be checked on every reload poll (nil when
// there is nothing to watch).
func (s *Store) watchFiles(files []string, reload func() error) *fileWatch {
	if len(files) == 0 {
		return nil
	}
	w := &fileWatch{s: s, files: files, reload: reload, stamp: versionsOf(files)}
	s.mu.Lock()
	s.watches = append(s.watches, w)
	s.mu.Unlock()
	return w
}

func (w *fileWatch) stop() {
	if w == nil {
		return
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	for i, x := range w.s.watches {
		if x == w {
			w.s.watches = append(w.s.watches[:i], w.s.watches[i+1:]...)
			break
		}
	}
}

// check reloads when the files changed (called from ReloadChanged only).
func (w *fileWatch) check() {
	v := versionsOf(w.files)
	if sameVersions(v, w.stamp) || sameVersions(v, w.failed) {
		return
	}
	label := "client-trust:" + strings.Join(w.files, ",")
	if err := w.reload(); err != nil {
		w.failed = v
		w.s.m.ReloadFailures.WithLabelValues(label).Inc()
		w.s.log.WithFields(logrus.Fields{"files": w.files, "error": err.Error()}).
			Warn("tls: changed client CA/CRL files do not load; the previous client trust stays in force")
		return
	}
	w.stamp, w.failed = v, nil
	w.s.m.Reloads.WithLabelValues(label).Inc()
	w.s.log.WithField("files", w.files).Info("tls: client CA/CRL reloaded")
}
