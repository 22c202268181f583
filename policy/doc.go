// Package policy is the kill switch as code.
//
// Compile turns a resolved config.Spec into a Ruleset: a pure, deterministic
// data model of one nftables table (the namespace's "inet vpn-confinement").
// CompileHost does the same for the host side of the optional host link
// ("inet vpnc-<name>" in the agent's own namespace). Render prints a Ruleset
// as nft text for review; the text loads with `nft -f` and replaces the table
// exactly as Apply does.
//
// Apply installs a Ruleset with one netlink transaction (add table, delete
// table, re-create it with everything in it), so an existing table is
// replaced atomically and there is never a moment without one. The table is
// never created with the owner flag: if the agent dies, the kill switch stays.
// Remove deletes a table (missing is fine). Inspect reads a loaded table back
// (rules, sets, named counters) so the watchdog can report drop counts and
// detect a deleted or tampered table (State.Verify).
//
// Every rule carries a comment saying why it exists, and every rule that
// drops or rejects counts into a named counter.
package policy
