// Package atomicfile replaces a file so that a crash at any point leaves
// either the old content or the new one, never a torn mix: every state file
// the gateway keeps (rules.json, apikeys.json, sni.json, a saved
// lbconfig.txt) goes through Write.
//
// Write creates a temporary file in the target's directory with the final
// mode, writes and fsyncs it, renames it over the target, then fsyncs the
// directory so the rename itself survives a power loss.
package atomicfile
