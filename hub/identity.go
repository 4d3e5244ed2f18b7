package hub

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/synapse-hub/synapse/gate"
	"github.com/synapse-hub/synapse/journal"
	"github.com/synapse-hub/synapse/wire"
)

// Identity pins (PROTOCOL.md §5.5; issue 23 item 2; docs/security.md,
// "Identity pins"): trust on first use, as the reference's default hub.
// The frame that binds a socket's name (its first) may carry a signed
// registration; gate.CheckRegistration verifies it. The decision, in the
// reference's order:
//
//   - name pinned, the frame proves the pinned key: admitted;
//   - name pinned, no signature, or a proof of anything else: refused, and
//     the socket closed 4013 "identity pin mismatch", with the recovery
//     command in the error;
//   - name not pinned, a complete proof (signature and
//     identity_public_key) that holds: the name is pinned to that key,
//     durably, then admitted;
//   - name not pinned, a proof that fails: refused, 4013 "identity binding
//     failed" (a broken proof never pins) — but for one only outside the
//     clock window (expired), which is admitted unpinned unless
//     RequireIdentity, so a client with a skewed clock keeps its hub;
//   - name not pinned, no complete proof: admitted as before, unless
//     Config.RequireIdentity, which refuses it 4013.
//
// The gate runs on the socket's read goroutine, before the name is bound
// and without Hub.mu: its store reads and writes (the journal's pin
// tables, under the journal's own lock) are never taken under Hub.mu.
// Frames after the bind pass it at the cost of one comparison.

// IdentityPinClose is the close code of a refused identity (the
// reference's, shared with "hub at capacity", PROTOCOL.md §1.6).
const IdentityPinClose = 4013

// The reasons of an identity close (the reference's).
const (
	reasonPinMismatch   = "identity pin mismatch"
	reasonBindingFailed = "identity binding failed"
)

// PinReclaimedClose closes a socket whose name's pin an operator
// reclaimed (the reference's 4017).
const PinReclaimedClose = 4017

// PinStore keeps which key each name is pinned to. *journal.Store is one
// (its identity_pins table, journal/pins.go); MemoryPins another.
type PinStore interface {
	// PinIdentity pins p.Name to p's key unless it is pinned already, and
	// returns the pin in force and whether this call made it.
	PinIdentity(p journal.IdentityPin) (journal.IdentityPin, bool, error)
	// LookupIdentityPin returns the pin of name, if any.
	LookupIdentityPin(name string) (journal.IdentityPin, bool, error)
	// IdentityPins lists every pin, by name.
	IdentityPins() ([]journal.IdentityPin, error)
	// ReclaimIdentityPin removes the pin of name, recording who and when;
	// false if it had none.
	ReclaimIdentityPin(name, by string, at float64) (journal.IdentityPin, bool, error)
}

// nonceStore is a PinStore that also keeps admitted proofs' nonces, so a
// restart does not reopen them to replay (*journal.Store).
type nonceStore interface {
	RecordIdentityNonce(n journal.IdentityNonce, forgetBefore float64) error
	IdentityNonces(since float64) ([]journal.IdentityNonce, error)
}

// nonceClaimer is a PinStore several hubs share (a fleet's etcd,
// cluster.Access): an admitted proof's nonce is claimed there before the
// bind, so a replay of the same registration to another hub within the
// window is refused there too, not only on the hub that admitted it.
type nonceClaimer interface {
	ClaimIdentityNonce(n journal.IdentityNonce, keep time.Duration) (fresh bool, err error)
}

// MemoryPins is a PinStore in memory: pins last as long as the process
// (a hub without a journal). Safe for concurrent use.
type MemoryPins struct {
	mu   sync.Mutex
	pins map[string]journal.IdentityPin
}

// PinIdentity implements PinStore.
func (m *MemoryPins) PinIdentity(p journal.IdentityPin) (journal.IdentityPin, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.pins[p.Name]; ok {
		return old, false, nil
	}
	if m.pins == nil {
		m.pins = make(map[string]journal.IdentityPin)
	}
	m.pins[p.Name] = p
	return p, true, nil
}

// LookupIdentityPin implements PinStore.
func (m *MemoryPins) LookupIdentityPin(name string) (journal.IdentityPin, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pins[name]
	return p, ok, nil
}

// IdentityPins implements PinStore.
func (m *MemoryPins) IdentityPins() ([]journal.IdentityPin, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]journal.IdentityPin, 0, len(m.pins))
	for _, p := range m.pins {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b journal.IdentityPin) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ReclaimIdentityPin implements PinStore (without an audit: there is no
// journal to keep one).
func (m *MemoryPins) ReclaimIdentityPin(name, _ string, _ float64) (journal.IdentityPin, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pins[name]
	delete(m.pins, name)
	return p, ok, nil
}

// identityRoom is the hub's side of identity pins; its fields are set in
// New and not changed after.
type identityRoom struct {
	pins     PinStore // nil: pins are off (Config.NoIdentityPins)
	verifier *gate.IdentityVerifier
	refusals *prometheus.CounterVec // synapse_identity_refusals_total{result}
	pinned   prometheus.Counter     // synapse_identity_pins_total
}

// initIdentity sets up the pin store and gives the verifier back the
// nonces an earlier process admitted that are still inside the window.
func (h *Hub) initIdentity() error {
	cfg := h.cfg
	h.ident.verifier = gate.NewIdentityVerifier()
	h.ident.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "synapse_identity_refusals_total",
		Help: "Registrations refused by the identity gate and closed 4013, by result (pin_mismatch, or the proof's verification_result)."}, []string{"result"})
	h.ident.pinned = prometheus.NewCounter(prometheus.CounterOpts{Name: "synapse_identity_pins_total", Help: "Names pinned to the key of their first signed registration."})
	h.m.reg.MustRegister(h.ident.refusals, h.ident.pinned)
	switch {
	case cfg.NoIdentityPins:
		return nil
	case cfg.IdentityPins != nil:
		h.ident.pins = cfg.IdentityPins
	case cfg.Journal != nil:
		h.ident.pins = cfg.Journal
	default:
		h.ident.pins = &MemoryPins{}
	}
	ns, ok := h.ident.pins.(nonceStore)
	if !ok {
		return nil
	}
	now := h.now()
	recent, err := ns.IdentityNonces(now - gate.MessageAuthWindow - gate.MessageAuthFutureSkew)
	if err != nil {
		return err
	}
	for _, n := range recent {
		h.ident.verifier.Remember(n.KeyID, n.Name, n.Nonce, n.SignedAt, now)
	}
	return nil
}

// identityGate runs the identity pin decision (above) on the frame that
// binds s's name, PROTOCOL.md §1.4 step 6. It reports false when the
// socket was refused and is being closed. Read goroutine only.
func (s *session) identityGate(sender string, in *wire.Inbound) bool {
	h := s.h
	if s.name != "" || reserved(sender) { // bound: nothing more to prove; reserved: register refuses it
		return true
	}
	pins := h.ident.pins
	if pins == nil && !h.cfg.RequireIdentity {
		return true
	}
	frame := in.Map()
	proof := gate.ReadProof(frame)
	var pin journal.IdentityPin
	pinned := false
	if pins != nil {
		var err error
		if pin, pinned, err = pins.LookupIdentityPin(sender); err != nil {
			// Fail closed: not knowing whether the name is pinned must
			// not let a squatter in.
			h.log.Error("hub: identity pin lookup failed", "name", sender, "err", err)
			return s.refuseIdentity(sender, reasonBindingFailed, "pin_store_unavailable",
				"Identity pins cannot be read ("+err.Error()+"); the hub's journal needs attention: see its log and run `synapse doctor`.")
		}
	}
	now := h.now()
	if pinned {
		if !proof.Signed {
			return s.refusePin(sender, pin, "signature missing")
		}
		pub, err := gate.ParseIdentityPublicKey(pin.PublicKey)
		if err != nil {
			return s.refusePin(sender, pin, "pinned key unreadable")
		}
		if r := h.ident.verifier.Verify(frame, sender, pin.KeyID, pub, now); r != gate.IdentityValid {
			return s.refusePin(sender, pin, r)
		}
		if !s.claimNonce(sender, proof) {
			return s.refusePin(sender, pin, gate.IdentityReplayed)
		}
		s.recordNonce(sender, proof)
		s.keyProved = true
		return true
	}
	if !proof.Signed || proof.PublicKey == "" {
		if h.cfg.RequireIdentity {
			h.ident.refusals.WithLabelValues(gate.IdentityMissingSignature).Inc()
			return s.refuseIdentity(sender, reasonBindingFailed, gate.IdentityMissingSignature,
				"identity binding failed: missing_signature. This hub requires a signed registration (--require-identity): connect with a client that signs with its machine key (synapse and its SDK do by default; unset SYNAPSE_NO_IDENTITY), or the reference's client with its cryptography extra installed.")
		}
		return true
	}
	if pins == nil { // --require-identity without pins: a valid self-contained proof is enough
		pub, err := gate.ParseIdentityPublicKey(proof.PublicKey)
		r := gate.IdentityUnknownKey
		if err == nil {
			r = h.ident.verifier.Verify(frame, sender, proof.KeyID, pub, now)
		}
		if r != gate.IdentityValid {
			return s.refuseProof(sender, r)
		}
		return true
	}
	pub, err := gate.ParseIdentityPublicKey(proof.PublicKey)
	if err != nil || proof.KeyID == "" {
		return s.refuseProof(sender, gate.IdentityUnknownKey)
	}
	if r := h.ident.verifier.Verify(frame, sender, proof.KeyID, pub, now); r != gate.IdentityValid {
		if r == gate.IdentityExpired && !h.cfg.RequireIdentity {
			// A stale proof on a name nobody pinned is what a skewed
			// clock gives: admitted as an unsigned registration would be
			// (and not pinned) rather than refused, unlike the reference:
			// pinning must not cost an agent with a wrong clock its hub.
			h.log.Warn("hub: identity proof outside the clock window (client clock skewed?): admitted unpinned", "name", sender)
			return true
		}
		return s.refuseProof(sender, r)
	}
	if !s.claimNonce(sender, proof) {
		return s.refuseProof(sender, gate.IdentityReplayed)
	}
	got, made, err := pins.PinIdentity(journal.IdentityPin{Name: sender, KeyID: proof.KeyID, PublicKey: proof.PublicKey, PinnedAt: now})
	switch {
	case err != nil:
		// The proof holds; only the pin could not be written (a
		// read-only journal, a full disk). Admitting it unpinned is what
		// an unsigned registration gets anyway.
		h.log.Warn("hub: identity pin not recorded", "name", sender, "err", err)
		return true
	case !made && (got.KeyID != proof.KeyID || got.PublicKey != proof.PublicKey):
		// Another socket pinned the name to another key meanwhile.
		return s.refusePin(sender, got, "pinned to another key meanwhile")
	}
	if made {
		h.ident.pinned.Inc()
		h.log.Info("hub: identity pinned", "name", sender, "key_id", proof.KeyID)
	}
	s.recordNonce(sender, proof)
	s.keyProved = true
	return true
}

// claimNonce claims a verified proof's nonce where several hubs share the
// pins (nonceClaimer), and reports false for a replay another hub admitted
// first. Where nothing is shared, or the store cannot answer, it is true:
// this hub's own replay cache has already said the proof is fresh, and an
// unreachable etcd must not refuse every agent (the proof is admitted, as
// an unsigned registration would be, and the failure logged).
func (s *session) claimNonce(sender string, p gate.Proof) bool {
	nc, ok := s.h.ident.pins.(nonceClaimer)
	if !ok {
		return true
	}
	fresh, err := nc.ClaimIdentityNonce(journal.IdentityNonce{KeyID: p.KeyID, Name: sender, Nonce: p.Nonce, SignedAt: p.SignedAt},
		time.Duration((gate.MessageAuthWindow+gate.MessageAuthFutureSkew)*float64(time.Second)))
	if err != nil {
		s.h.log.Warn("hub: identity nonce not claimed in the fleet: its replay on another hub within the window is not refused", "name", sender, "err", err)
		return true
	}
	return fresh
}

// recordNonce writes an admitted proof's nonce down, so a restarted hub
// refuses its replay. A failure only weakens that, and is logged.
func (s *session) recordNonce(sender string, p gate.Proof) {
	ns, ok := s.h.ident.pins.(nonceStore)
	if !ok {
		return
	}
	now := s.h.now()
	err := ns.RecordIdentityNonce(journal.IdentityNonce{KeyID: p.KeyID, Name: sender, Nonce: p.Nonce, SignedAt: p.SignedAt},
		now-gate.MessageAuthWindow-gate.MessageAuthFutureSkew)
	if err != nil {
		s.h.log.Warn("hub: identity nonce not recorded: a restart within 10 s could admit its replay", "name", sender, "err", err)
	}
}

// refusePin refuses a pinned name's registration: the error names the
// pinned key and the command that reclaims the name.
func (s *session) refusePin(sender string, pin journal.IdentityPin, detail string) bool {
	s.h.ident.refusals.WithLabelValues("pin_mismatch").Inc()
	msg := "identity pin: name '" + sender + "' is pinned to key " + pin.KeyID + " (" + detail + "). " +
		"Connect from the machine holding that key, or have the hub's operator run `synapse identity reclaim " + shellArg(sender) +
		"` (over the socket with the hub's token, or with --db on the hub's journal) to pin it anew."
	return s.refuseIdentity(sender, reasonPinMismatch, detail, msg)
}

// refuseProof refuses a broken proof on a name not pinned.
func (s *session) refuseProof(sender, result string) bool {
	s.h.ident.refusals.WithLabelValues(result).Inc()
	return s.refuseIdentity(sender, reasonBindingFailed, result,
		"identity signature invalid: "+result+". The registration's signature does not hold for its identity_public_key (a clock more than 1 s fast or 10 s slow gives 'expired'; a replayed registration 'replayed'); reconnect, which signs anew.")
}

// refuseIdentity sends the error (with verification_result, as the
// reference) and closes the socket 4013.
func (s *session) refuseIdentity(sender, reason, result, msg string) bool {
	code := "identity_binding_failed"
	if reason == reasonPinMismatch {
		code = "identity_pin_mismatch"
	}
	s.h.m.framesOut.WithLabelValues("error").Inc()
	s.reply(s.frame("error", sender, msg).Str("verification_result", result).Str("error_code", code).Bytes())
	s.closeWith(IdentityPinClose, reason)
	return false
}

// shellArg quotes a name for a shell command line when it needs it.
func shellArg(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=@:,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// identityPinList answers identity_pin_list with every pin (public keys
// and key ids only; nothing secret). Any agent may ask.
func (s *session) identityPinList(sender string) {
	pins := s.h.ident.pins
	if pins == nil {
		s.fail(sender, "identity_pins_off", "This hub keeps no identity pins (--no-identity-pins).")
		return
	}
	list, err := pins.IdentityPins()
	if err != nil {
		s.fail(sender, "pin_store_unavailable", "Identity pins cannot be read: "+err.Error())
		return
	}
	if list == nil {
		list = []journal.IdentityPin{}
	}
	b, _ := json.Marshal(list)
	s.reply(s.frame("identity_pin_list_result", sender, "").Raw("pins", b).Bytes())
}

// identityPinReclaim answers identity_pin_reclaim {pin_name,
// expected_key_id, reason} (the reference's verb): the pin is removed
// (and the removal audited in the journal), a live holder of the name is
// closed 4017, and the name's next signed registration pins it anew. Who
// may: the operator, or whom an access rule allows (mayReclaimPin,
// access.go); an open hub without rules refuses, since any local process
// could reach it (`synapse identity reclaim --db` on the stopped hub's
// journal instead).
func (s *session) identityPinReclaim(sender string, in *wire.Inbound) {
	h := s.h
	name := strings.TrimSpace(in.Str("pin_name"))
	expected := strings.TrimSpace(in.Str("expected_key_id"))
	result := func(applied bool, prev, detail string) {
		s.reply(s.frame("identity_pin_reclaim_result", sender, detail).Str("pin_name", name).Str("expected_key_id", expected).
			Bool("applied", applied).Str("previous_key_id", prev).Str("detail", detail).Bytes())
	}
	if name == "" {
		result(false, "", "pin_name is required: identity_pin_reclaim {pin_name: NAME}.")
		return
	}
	if h.ident.pins == nil {
		result(false, "", "This hub keeps no identity pins (--no-identity-pins).")
		return
	}
	if ok, refused, why := s.mayReclaimPin(sender, name, in); refused {
		return
	} else if !ok {
		result(false, "", why)
		return
	}
	pin, found, err := h.ident.pins.LookupIdentityPin(name)
	switch {
	case err != nil:
		result(false, "", "Identity pins cannot be read: "+err.Error())
		return
	case !found:
		result(false, "", "Name '"+name+"' is not pinned: nothing to reclaim.")
		return
	case expected != "" && expected != pin.KeyID:
		result(false, pin.KeyID, "Name '"+name+"' is pinned to key "+pin.KeyID+", not "+expected+": nothing changed.")
		return
	}
	removed, found, err := h.ident.pins.ReclaimIdentityPin(name, sender, h.now())
	if err != nil || !found {
		detail := "the pin changed before the reclaim could be applied"
		if err != nil {
			detail = "the reclaim could not be written: " + err.Error()
		}
		result(false, pin.KeyID, detail)
		return
	}
	h.log.Warn("hub: identity pin reclaimed", "name", name, "key_id", removed.KeyID, "by", sender, "reason", in.Str("reason"))
	h.mu.Lock()
	if old := h.reg.byName[name]; old != nil && old != s {
		old.closeWith(PinReclaimedClose, "identity pin reclaimed")
	}
	h.mu.Unlock()
	result(true, removed.KeyID, "Identity pin for '"+name+"' (key "+removed.KeyID+") was reclaimed; its next signed registration pins it anew.")
}
