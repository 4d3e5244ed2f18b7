// Package dashboard holds the hub's web page: plain HTML, CSS and
// JavaScript, embedded in the binary (no CDN, no build step), served by the
// hub at / (hub/api.go). The page reads /api/state once and then follows
// /api/events; docs/dashboard.md says what each panel shows, docs/api.md
// what the API returns.
package dashboard

import (
	"embed"
	"io/fs"
)

//go:embed static
var files embed.FS

// Static returns the page's files: index.html, login.html, app.js,
// style.css.
func Static() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the folder is embedded: this cannot fail
	}
	return sub
}
