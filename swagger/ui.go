package swagger

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// uiFiles are the Swagger UI assets, embedded so the UI works without network
// access. README.md and the licence files are embedded too so a binary
// carries its notices.
//
//go:embed ui
var uiFiles embed.FS

// uiIndex is the page served at the docs root.
const uiIndex = "index.html"

// UIHandler serves the Swagger UI mounted at prefix (e.g. /netlox/v1/docs):
// prefix and prefix+"/" serve index.html, prefix+"/<file>" the asset.
func UIHandler(prefix string) http.Handler {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic("swagger: embedded ui directory missing: " + err.Error()) // impossible with go:embed ui
	}
	files := http.FileServer(http.FS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r.URL.Path, prefix)), "/")
		if name == "" || name == "." || name == uiIndex {
			serveIndex(w, r, sub)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		files.ServeHTTP(w, r2)
	})
}

// serveIndex writes index.html directly: http.FileServer would redirect
// /index.html to ./ and the bare prefix to prefix/.
func serveIndex(w http.ResponseWriter, r *http.Request, sub fs.FS) {
	b, err := fs.ReadFile(sub, uiIndex)
	if err != nil {
		http.Error(w, "swagger ui index missing", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}
