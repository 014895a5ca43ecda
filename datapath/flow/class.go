package flow

import (
	"strconv"
	"strings"
)

// Class is a request's priority class; a higher value dispatches first and
// is shed last.
type Class uint8

// The classes, lowest first. Their names are what headers, API keys and
// options spell.
const (
	ClassLow      Class = iota // "low" (also "sheddable"): batch and background work
	ClassStandard              // "standard" (also "default"): the default class
	ClassHigh                  // "high" (also "critical"): interactive traffic
	NumClasses    = 3
)

// DefaultClass is the class of a request that names none, or names one
// that does not exist.
const DefaultClass = ClassStandard

var classNames = [NumClasses]string{"low", "standard", "high"}

// String is the class's canonical name.
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "class" + strconv.Itoa(int(c))
}

// ParseClass reads a class name (canonical or alias, any letter case,
// surrounding spaces ignored) or its number ("0".."2"); ok is false for
// anything else.
func ParseClass(s string) (c Class, ok bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "low", "sheddable", "0":
		return ClassLow, true
	case "standard", "default", "1":
		return ClassStandard, true
	case "high", "critical", "2":
		return ClassHigh, true
	}
	return DefaultClass, false
}

// Names lists the canonical class names, lowest first (for messages and
// validation).
func Names() []string { return classNames[:] }

// Grant is the class a request gets: the one it asked for (asked; ok false
// when it asked for none or for one that does not exist, which means
// DefaultClass), never above ceiling (what its API key, or the gateway for
// requests without a key, allows).
func Grant(asked Class, ok bool, ceiling Class) Class {
	if !ok {
		asked = DefaultClass
	}
	return min(asked, ceiling)
}
