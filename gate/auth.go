package gate

import (
	"container/heap"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/synapse-hub/synapse/pyjson"
	"github.com/synapse-hub/synapse/wire"
)

// Authentication (PROTOCOL.md §5; docs/security.md says what each part
// protects against and what it does not): the secrets' files and key
// specs, and per-message HMAC. The connect token itself is compared by the
// hub on a socket's first frame; its failures are counted per remote host
// in a HostBuckets.
//
// A Verifier is shared by every socket: its keys are immutable once built
// and its replay cache is guarded by its own mutex.

// Per-message authentication constants (INV-CK-2; spec constants
// DEFAULT_MESSAGE_AUTH_WINDOW_SECONDS and …_FUTURE_SKEW_SECONDS).
const (
	MessageAuthWindow     = 10.0 // seconds a signed frame's auth.timestamp may lag the hub's clock
	MessageAuthFutureSkew = 1.0  // seconds it may lead it
	messageAuthAlg        = "hmac-sha256"
)

// Replay-cache bounds. The reference keeps one global pool of 4096 that a
// few senders can fill, refusing everyone (PROTOCOL.md §8.1); here each
// (key, sender) pair has its own bound, so a sender that floods only
// refuses itself, and the total is bounded by the configured pairs too.
var (
	replayPerSender = 4096    // live nonces per (kid, sender): 100/s × 11 s fits 3.7 times
	replayTotal     = 1 << 18 // live nonces in all
	maxNonceBytes   = 256     // longer nonces are refused, so entries stay small
)

// Verification results: the reference's verification_result strings
// (PROTOCOL.md §5.2).
const (
	VerifyOK                = "ok"
	VerifyMissing           = "missing"
	VerifyUnknownKey        = "unknown_key"
	VerifySenderMismatch    = "sender_mismatch"
	VerifyBadAuthentication = "bad_authentication"
	VerifySequenceMismatch  = "sequence_mismatch"
	VerifyExpired           = "expired"
	VerifyReplayed          = "replayed"
)

// MessageAuthKey is one HMAC key and the senders it may sign for
// (--message-auth-key KEY_ID:SECRET:SENDER[,SENDER…]).
type MessageAuthKey struct {
	ID      string
	Secret  []byte
	Senders []string
}

// ErrKeySpec is wrapped by every refusal of a key spec or key file.
var ErrKeySpec = errors.New("message auth key")

// ParseMessageAuthKey reads KEY_ID:SECRET:SENDER[,SENDER…]. The key id runs
// to the first colon and the senders follow the last, so a secret may
// contain colons but a sender name may not.
func ParseMessageAuthKey(spec string) (MessageAuthKey, error) {
	spec = strings.TrimSpace(spec)
	i, j := strings.IndexByte(spec, ':'), strings.LastIndexByte(spec, ':')
	if i < 0 || i == j {
		return MessageAuthKey{}, fmt.Errorf("%w: want KEY_ID:SECRET:SENDER[,SENDER…], got %d colon-separated part(s)", ErrKeySpec, strings.Count(spec, ":")+1)
	}
	k := MessageAuthKey{ID: spec[:i], Secret: []byte(spec[i+1 : j])}
	for _, s := range strings.Split(spec[j+1:], ",") {
		if s = strings.TrimSpace(s); s != "" {
			k.Senders = append(k.Senders, s)
		}
	}
	switch {
	case k.ID == "":
		return MessageAuthKey{}, fmt.Errorf("%w: empty key id", ErrKeySpec)
	case len(k.Secret) == 0:
		return MessageAuthKey{}, fmt.Errorf("%w %q: empty secret", ErrKeySpec, k.ID)
	case len(k.Senders) == 0:
		// The reference accepts it and then denies every frame; a key
		// that can sign for no one is a typo here.
		return MessageAuthKey{}, fmt.Errorf("%w %q: no sender: name the agents this key signs for after the last ':'", ErrKeySpec, k.ID)
	}
	return k, nil
}

// ReadMessageAuthKeyFile reads one key spec per line (--message-auth-key-file);
// blank lines and lines starting with '#' are skipped. Like a token file it
// must not be readable by everyone.
func ReadMessageAuthKeyFile(path string) ([]MessageAuthKey, error) {
	text, err := readSecretFile(path)
	if err != nil {
		return nil, err
	}
	var keys []MessageAuthKey
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := ParseMessageAuthKey(line)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n+1, err)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: %s holds no key", ErrKeySpec, path)
	}
	return keys, nil
}

// ReadTokenFile returns the first line of path, trimmed (--token-file). A
// file everyone may read is refused: the token is the hub's only secret.
func ReadTokenFile(path string) (string, error) {
	text, err := readSecretFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(text, "\n")
	if tok := strings.TrimSpace(line); tok != "" {
		return tok, nil
	}
	return "", fmt.Errorf("token file %s: the first line is empty", path)
}

// readSecretFile reads a file holding secrets, refusing one whose mode lets
// every local user read it.
func readSecretFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		return "", fmt.Errorf("secret file %s is readable by every user (mode %04o): run 'chmod 600 %s'", path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	return string(b), nil
}

// Verifier checks signed frames against the configured keys (§5.2) and
// remembers the nonces of those it admitted until their window closes
// (§5.3). Safe for concurrent use.
type Verifier struct {
	keys   map[string]*MessageAuthKey
	replay *replayCache
	// horizon is the boot horizon: a frame whose auth.timestamp is not
	// after it is refused as expired. The replay cache lives in memory, so
	// a restart forgets the nonces the previous process admitted; every
	// one of those carried a timestamp at most MessageAuthFutureSkew past
	// that process's last instant, which came before this one started
	// (docs/security.md, "Replay across a restart").
	horizon float64
}

// NewVerifier checks the configured keys and returns their verifier, or
// nil without keys. require is --require-message-auth: with no key every
// signed verb would be refused, so it is an error. started is the hub's
// start time (its clock, unix seconds): frames signed before it are
// expired. A malformed or repeated key is refused with an error wrapping
// ErrKeySpec.
func NewVerifier(keys []MessageAuthKey, require bool, started float64) (*Verifier, error) {
	if require && len(keys) == 0 {
		return nil, errors.New("--require-message-auth needs at least one --message-auth-key: every signed verb would be refused")
	}
	byID := make(map[string]*MessageAuthKey, len(keys))
	for i := range keys {
		k := &keys[i]
		if k.ID == "" || len(k.Secret) == 0 || len(k.Senders) == 0 {
			return nil, fmt.Errorf("%w %q: id, secret and at least one sender are required", ErrKeySpec, k.ID)
		}
		if byID[k.ID] != nil {
			return nil, fmt.Errorf("%w %q is configured twice", ErrKeySpec, k.ID)
		}
		byID[k.ID] = k
	}
	if len(byID) == 0 {
		return nil, nil
	}
	return &Verifier{keys: byID, replay: newReplayCache(replayPerSender, replayTotal),
		horizon: started + MessageAuthFutureSkew}, nil
}

// Verify checks one frame of a signed verb from the socket bound to
// boundSender at hub time now, in the reference's order (§5.2), and admits
// its nonce if everything else holds. It returns VerifyOK or the
// verification_result of the refusal. Whether a frame must be signed at
// all (Signed, --require-message-auth) is the caller's to decide.
func (v *Verifier) Verify(boundSender string, in *wire.Inbound, now float64) string {
	auth, ok := in.Value("auth").(map[string]any)
	if !ok {
		return VerifyMissing
	}
	kid, _ := auth["kid"].(string)
	key := v.keys[kid]
	if key == nil {
		return VerifyUnknownKey
	}
	if sender, _ := in.Value("sender").(string); sender != boundSender || !slices.Contains(key.Senders, boundSender) {
		return VerifySenderMismatch
	}
	if alg, _ := auth["alg"].(string); alg != messageAuthAlg {
		return VerifyBadAuthentication
	}
	if !positiveInt(auth["sequence"]) {
		return VerifySequenceMismatch
	}
	ts, ok := jsonFloat(auth["timestamp"])
	if !ok {
		return VerifyBadAuthentication
	}
	// INV-CK-2: [now − window, now + future skew], both ends included,
	// and after the boot horizon.
	if ts < now-MessageAuthWindow || ts > now+MessageAuthFutureSkew || ts <= v.horizon {
		return VerifyExpired
	}
	nonce, _ := auth["nonce"].(string)
	value, _ := auth["value"].(string)
	if nonce == "" || value == "" || len(nonce) > maxNonceBytes {
		return VerifyBadAuthentication
	}
	want, err := signature(key.Secret, in.Map())
	if err != nil || !hmac.Equal([]byte(want), []byte(value)) {
		return VerifyBadAuthentication
	}
	// Only a frame whose HMAC holds reaches the cache, so forgeries
	// cannot fill it.
	if !v.replay.admit(kid+"\x00"+boundSender, nonce, ts+MessageAuthWindow, now) {
		return VerifyReplayed
	}
	return VerifyOK
}

// SignMessage returns the lowercase hex HMAC-SHA256 a client puts in
// auth.value: over the canonical JSON (sorted keys, ensure_ascii=False) of
// frame with auth.value removed. frame is a decoded JSON object (numbers as
// json.Number keep Python's int/float split); it is not modified.
func SignMessage(secret []byte, frame map[string]any) (string, error) {
	return signature(secret, frame)
}

// Signer signs frames for per-message authentication as a client must
// (§5.2): each frame gets an auth object (alg, kid, nonce, a sequence one
// higher than the last, timestamp) and its HMAC over the frame as the hub
// will decode it. Not safe for concurrent use.
type Signer struct {
	KeyID  string
	Secret []byte
	seq    int64
}

// Sign returns frame with its signed auth object, stamped at ts (unix
// seconds) with nonce. The frame is encoded and decoded first, so the
// signature covers what the hub reads; frame itself gains the unsigned
// auth object.
func (s *Signer) Sign(frame map[string]any, ts float64, nonce string) (map[string]any, error) {
	s.seq++
	frame["auth"] = map[string]any{"alg": "hmac-sha256", "kid": s.KeyID, "nonce": nonce, "sequence": s.seq, "timestamp": ts}
	b, err := json.Marshal(frame)
	if err != nil {
		return nil, fmt.Errorf("gate: sign: %w", err)
	}
	in, err := wire.Decode(b, 0, wire.DefaultMaxDepth)
	if err != nil {
		return nil, fmt.Errorf("gate: sign: %w", err)
	}
	m := in.Map()
	v, err := SignMessage(s.Secret, m)
	if err != nil {
		return nil, err
	}
	m["auth"].(map[string]any)["value"] = v
	return m, nil
}

func signature(secret []byte, frame map[string]any) (string, error) {
	c := make(map[string]any, len(frame))
	for k, v := range frame {
		c[k] = v
	}
	if auth, ok := frame["auth"].(map[string]any); ok {
		a := make(map[string]any, len(auth))
		for k, v := range auth {
			if k != "value" {
				a[k] = v
			}
		}
		c["auth"] = a
	}
	b, err := pyjson.AppendCanonical(nil, c, false)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(b)
	return hex.EncodeToString(mac.Sum(nil)), nil
}

// jsonFloat reads a decoded JSON number of either kind.
func jsonFloat(v any) (float64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	return f, err == nil
}

// positiveInt reports whether v is a decoded JSON integer of at least 1:
// an integer lexeme, not a float one ("1.0", "1e0") or a bool.
func positiveInt(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	i, err := n.Int64() // strconv.ParseInt: digits only
	return err == nil && i >= 1
}

// replayCache remembers the nonces of verified frames until their auth
// timestamp leaves the window (§5.3), bounded per sender and in total.
// When a bound is reached it fails closed — the frame is refused as
// replayed — rather than forget a live nonce, which would reopen it to
// replay. Expiry is heap-driven per sender. Safe for concurrent use.
type replayCache struct {
	perSender, total int

	mu      sync.Mutex
	senders map[string]*nonceSet
	live    int
}

func newReplayCache(perSender, total int) *replayCache {
	return &replayCache{perSender: perSender, total: total, senders: make(map[string]*nonceSet)}
}

// admit records nonce for sender until expires; false means it was seen
// within the window, or the cache cannot hold it.
func (c *replayCache) admit(sender, nonce string, expires, now float64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := c.senders[sender]
	if set == nil {
		set = &nonceSet{at: make(map[string]float64)}
		c.senders[sender] = set
	}
	c.live -= set.expire(now)
	if _, seen := set.at[nonce]; seen {
		return false
	}
	if len(set.at) >= c.perSender {
		return false // this sender is flooding; only it is refused
	}
	if c.live >= c.total {
		c.sweep(now)
		if c.live >= c.total {
			return false
		}
	}
	set.at[nonce] = expires
	heap.Push(&set.byExpiry, nonceEntry{nonce, expires})
	c.live++
	return true
}

// sweep expires every sender's due nonces and forgets empty senders.
func (c *replayCache) sweep(now float64) {
	for s, set := range c.senders {
		c.live -= set.expire(now)
		if len(set.at) == 0 {
			delete(c.senders, s)
		}
	}
}

// nonceSet is one sender's live nonces.
type nonceSet struct {
	at       map[string]float64 // nonce → when it may be forgotten
	byExpiry nonceHeap
}

// expire forgets the nonces due by now and returns how many.
func (s *nonceSet) expire(now float64) int {
	n := 0
	for len(s.byExpiry) > 0 && s.byExpiry[0].expires < now {
		e := heap.Pop(&s.byExpiry).(nonceEntry)
		delete(s.at, e.nonce)
		n++
	}
	return n
}

type nonceEntry struct {
	nonce   string
	expires float64
}

type nonceHeap []nonceEntry

func (h nonceHeap) Len() int           { return len(h) }
func (h nonceHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h nonceHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *nonceHeap) Push(x any)        { *h = append(*h, x.(nonceEntry)) }
func (h *nonceHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
