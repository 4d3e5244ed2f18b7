// Package access holds the pure logic of who may do what on a hub (issue
// 23): per-agent credentials bound to a name pattern and roles, role
// grants, and access rules (an ACL) with an indexed deny-by-default
// decision. It does no network I/O and reads no clock: the hub passes the
// time in, and persistence is a Backing the journal implements
// (journal/access.go).
//
//   - glob.go: the one pattern language every part uses (Match).
//   - credential.go: Credential, tokens and their digests.
//   - registry.go: Registry, the credentials indexed by digest and id,
//     and the role grants; safe for concurrent use.
//   - acl.go: Rule, Policy, Parse and Decide, the rules indexed by
//     permission, target kind and the principal pattern's namespace.
//
// docs/security.md describes the modes and what each protects against.
package access
