// Package dashboard is the hub's web dashboard: the page at / (plain HTML,
// CSS and JavaScript embedded in the binary: no CDN, no build step), its
// sign-in, its read-only JSON API under /api/ and the live event stream
// /api/events (docs/dashboard.md says what each panel shows, docs/api.md
// what each route returns). The page reads /api/state once and then
// follows /api/events.
//
// The package holds the HTTP side and the feed; the hub holds the data.
// The hub implements Backend (the slice of it the dashboard reads),
// publishes what changes to a Feed, and routes / and /api/ to Server.Serve
// after its Host and Origin policy has admitted the request. This package
// never imports the hub.
//
// Files: server.go routes and sets the security headers; signin.go is the
// token, the session cookie and the login form; api.go serves the JSON
// routes and the event stream; feed.go fans events out to the streams and
// keeps the recent refusals; state.go holds the JSON bodies.
//
// Locks: the dashboard takes none of the hub's locks itself. The Backend
// methods that read the hub's state take them (each says which), and are
// never called with the Feed's lock held. The Feed's lock is taken by
// publishers under the hub's locks (the sequencer, then Hub.mu, then the
// Feed's: never the other way round), and by Backend.State through
// Feed.Mark; it is held only to encode one event and hand it to every
// stream without blocking.
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
