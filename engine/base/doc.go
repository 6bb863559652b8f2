// Package base holds what every engine package shares and nothing else:
// identifier and literal quoting, the advisory-lock key derivation and the
// classification of worker errors (retry, data, internal). It imports no
// other engine package, so any of them may use it.
package base
