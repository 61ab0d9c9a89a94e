// Package engine decides and performs fencing of foreign RBD clients.
package engine
