// Package persist keeps the fleet's snapshot in a bbolt file, so that a restart is warm.
//
// For each cluster it stores the cluster's identity, and for each of the cluster's
// resources the objects together with the resourceVersion they were current at, written
// in one transaction. It loads, verifies and migrates the file, and moves a corrupt file
// aside instead of failing.
//
// This package knows nothing about HTTP or config files.
package persist
