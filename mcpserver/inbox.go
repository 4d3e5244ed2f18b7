package mcpserver

import (
	"regexp"
	"sort"
	"strings"
	"time"
)

// The inbox holds the chats addressed to this agent: those received live
// since the server started, and the hub's mailbox (directed chats sent
// while the agent was offline, replayed from the hub's journal after the
// agent's acked cursor; a hub without a journal has none). Acking marks
// messages read and acks their seqs to the hub, which moves the mailbox
// cursor and settles the senders' deferred receipts. Read messages are
// kept until the cap pushes them out.

// Message is one chat in the inbox.
type Message struct {
	ID       int64  `json:"id" jsonschema:"inbox id: pass the highest one you handled as ack_through"`
	Seq      int64  `json:"seq,omitempty" jsonschema:"the hub's durable sequence number (hubs with a journal)"`
	MsgID    int64  `json:"msg_id,omitempty"`
	From     string `json:"from"`
	To       string `json:"to" jsonschema:"the target the sender used: your name, your project, a role, a glob or all"`
	Text     string `json:"text"`
	At       string `json:"at,omitempty"`
	Directed bool   `json:"directed" jsonschema:"true when addressed to you (or your project or role), false for a broadcast"`
	Priority bool   `json:"priority,omitempty"`
	Channel  string `json:"channel,omitempty"`
	Read     bool   `json:"read"`

	clientMsgID string
}

// defaultInboxCap is how many messages an inbox keeps by default.
const defaultInboxCap = 1000

type inbox struct {
	cap  int
	next int64
	msgs []Message // in arrival order
}

func newInbox(capacity int) inbox {
	if capacity <= 0 {
		capacity = defaultInboxCap
	}
	return inbox{cap: capacity, next: 1}
}

// add files m unless it is a duplicate (the same hub seq, or the same
// sender and client_msg_id: chat is at-least-once). It reports whether m
// was new, and m as filed (with its inbox id).
func (b *inbox) add(m Message) (Message, bool) {
	for _, o := range b.msgs {
		if (m.Seq != 0 && o.Seq == m.Seq) || (m.clientMsgID != "" && o.From == m.From && o.clientMsgID == m.clientMsgID) {
			return o, false
		}
	}
	m.ID, b.next = b.next, b.next+1
	if m.At == "" {
		m.At = time.Now().UTC().Format(time.RFC3339)
	}
	b.msgs = append(b.msgs, m)
	if len(b.msgs) > b.cap {
		b.msgs = append([]Message(nil), b.msgs[len(b.msgs)-b.cap:]...)
	}
	return m, true
}

// ackThrough marks every message up to id read. It returns how many it
// changed and the hub seqs of the directed ones, to ack to the hub.
func (b *inbox) ackThrough(id int64) (int, []int64) {
	n := 0
	var seqs []int64
	for i := range b.msgs {
		if m := &b.msgs[i]; m.ID <= id && !m.Read {
			m.Read = true
			n++
			if m.Seq > 0 && m.Directed {
				seqs = append(seqs, m.Seq)
			}
		}
	}
	return n, seqs
}

// list returns the unread messages (all with all), oldest first, at most
// limit (the newest ones) when limit > 0.
func (b *inbox) list(all bool, limit int) []Message {
	out := []Message{}
	for _, m := range b.msgs {
		if all || !m.Read {
			out = append(out, m)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

func (b *inbox) unread() int {
	n := 0
	for _, m := range b.msgs {
		if !m.Read {
			n++
		}
	}
	return n
}

// addressedTo applies the hub's recipient rule (PROTOCOL.md §2.2 step 7)
// to a chat's target: "" and "all" reach everyone (not directed);
// otherwise each comma-separated part is an fnmatch glob ('*' crosses '/')
// matched against the full name and its project. directed is false for
// broadcasts and globs with '*', as on the hub.
func addressedTo(target, name string) (directed, mine bool) {
	target = strings.TrimSpace(target)
	if target == "" || target == "all" {
		return false, true
	}
	project, _, _ := strings.Cut(name, "/")
	for part := range strings.SplitSeq(target, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if fnmatch(part, name) || fnmatch(part, project) {
			return !strings.Contains(target, "*"), true
		}
	}
	return false, false
}

// fnmatch is Python's fnmatch.fnmatchcase: * ? [seq] [!seq], where * also
// matches '/'.
func fnmatch(pattern, s string) bool {
	if !strings.ContainsAny(pattern, "*?[") {
		return pattern == s
	}
	var re strings.Builder
	re.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*':
			re.WriteString("(?s:.*)")
		case '?':
			re.WriteString("(?s:.)")
		case '[':
			j := i + 1
			if j < len(pattern) && pattern[j] == '!' {
				j++
			}
			if j < len(pattern) && pattern[j] == ']' {
				j++
			}
			for j < len(pattern) && pattern[j] != ']' {
				j++
			}
			if j >= len(pattern) {
				re.WriteString(`\[`)
				continue
			}
			class := pattern[i+1 : j]
			i = j
			re.WriteString("[")
			if strings.HasPrefix(class, "!") {
				re.WriteString("^")
				class = class[1:]
			}
			re.WriteString(strings.NewReplacer(`\`, `\\`, `[`, `\[`, `]`, `\]`, `^`, `\^`).Replace(class))
			re.WriteString("]")
		default:
			j := strings.IndexAny(pattern[i:], "*?[")
			if j < 0 {
				j = len(pattern) - i
			}
			re.WriteString(regexp.QuoteMeta(pattern[i : i+j]))
			i += j - 1
		}
	}
	re.WriteString("$")
	ok, err := regexp.MatchString(re.String(), s)
	return err == nil && ok
}

func rfc3339(s float64) string {
	if s == 0 {
		return ""
	}
	return time.Unix(0, int64(s*1e9)).UTC().Format(time.RFC3339)
}

func sortStrings(s []string) { sort.Strings(s) }
