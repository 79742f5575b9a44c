// Package persisttest damages snapshot files, for the tests of how persist recovers
// from them. ReadLayout maps a bbolt file into the regions a damage can hit (meta
// pages, the freelist, branch and leaf pages, stored values, free pages), read
// independently of persist's own checks; RandomDamages draws damages over them and
// Apply writes one.
package persisttest
