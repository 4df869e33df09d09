// Package dev is the tooling wing: what runs the platform on one machine
// (platform, pgcluster, pki), drives and judges it (load, drill, checker,
// issuersim, benchrun), explores its protocol (model) and what the tests
// share (pgtest, testutil). None of it ships: the binaries that do
// (cmd/gtr, cmd/cell, cmd/replicator, cmd/gtrctl) and pkg/ must never
// import a package under internal/dev, and TestShippedCodeStaysOutOfDev
// fails when one does. Their tests may.
//
// The shipped wing is the rest of internal/: every package there is
// imported by a shipped binary, which the same test checks, so that
// tooling does not settle among the product by accident.
package dev
