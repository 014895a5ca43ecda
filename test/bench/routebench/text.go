package main

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/infergate/infergate/kvexact/bpe"
)

// candidateWords are common English words; those the tokenizer encodes as
// one token with a leading space become the vocabulary of generated text,
// so "n tokens of text" is exactly n words and texts concatenate without
// merging across their boundary (the pre-tokenizer splits before " word").
var candidateWords = strings.Fields(`
able about above across act action add after again against age ago agree air all allow
almost alone along already also always among amount and animal another answer any appear apply
area argue arm army around arrive art article ask attack author available away baby back bad bag
ball bank base beat beautiful because become bed before begin behind believe best better between
big bill bit black blood blue board body book born both box boy break bring brother budget build
building business buy call camera campaign car card care career carry case catch cause cell center
central century certain chair chance change character charge check child choice church citizen city
civil claim class clear close coach cold collection college color come common community company
compare computer concern condition conference consider contain continue control cost could country
couple course court cover create crime cultural culture cup current customer cut dark data daughter
day dead deal death debate decade decide decision deep defense degree democratic describe design
despite detail determine develop difference different difficult dinner direction director discover
discuss disease doctor dog door down draw dream drive drop drug during each early east easy eat
economic economy edge education effect effort eight either election else employee end energy enjoy
enough enter entire environment especially establish even evening event ever every evidence exactly
example executive exist expect experience expert explain eye face fact factor fail fall family far
fast father fear federal feel few field fight figure fill film final finally financial find fine
finger finish fire firm first fish five floor fly focus follow food foot force foreign forget form
former forward four free friend front full fund future game garden gas general generation girl give
glass goal good government great green ground group grow growth guess gun guy hair half hand hang
happen happy hard have head health hear heart heat heavy help her here herself high him himself his
history hit hold home hope hospital hot hotel hour house however huge human hundred husband idea
identify image imagine impact important improve include including increase indeed indicate
individual industry information inside instead institution interest interesting international
interview into investment involve issue item itself job join just keep key kid kill kind kitchen
know knowledge land language large last late later laugh law lawyer lay lead leader learn least
leave left leg legal less letter level lie life light like likely line list listen little live
local long look lose loss lot love low machine magazine main maintain major majority make man
manage management manager many market marriage material matter may maybe mean measure media medical
meet meeting member memory mention message method middle might military million mind minute miss
mission model modern moment money month more morning most mother mouth move movement movie much
music must myself name nation national natural nature near nearly necessary need network never news
newspaper next nice night none nor north not note nothing notice now number occur off offer office
officer official often oil old once one only onto open operation opportunity option order
organization other others our out outside over own owner page pain painting paper parent part
participant particular partner party pass past patient pattern pay peace people per perform
performance perhaps period person personal phone physical pick picture piece place plan plant play
player point police policy political politics poor popular population position positive possible
power practice prepare present president pressure pretty prevent price private probably problem
process produce product production professional professor program project property protect prove
provide public pull purpose push put quality question quickly quite race radio raise range rate
rather reach read ready real reality realize really reason receive recent recently recognize record
red reduce reflect region relate relationship religious remain remember remove report represent
require research resource respond response rest result return reveal rich right rise risk road rock
role room rule run safe same save say scene school science scientist score sea season seat second
section security see seek seem sell send senior sense series serious serve service set seven
several shake share she shoot short shot should shoulder show side sign significant similar simple
simply since sing single sister sit site situation six size skill skin small smile social society
soldier some somebody someone something sometimes son song soon sort sound source south southern
space speak special specific speech spend sport spring staff stage stand standard star start state
statement station stay step still stock stop store story strategy street strong structure student
study stuff style subject success successful such suddenly suffer suggest summer support sure
surface system table take talk task tax teach teacher team technology television tell ten tend term
test than thank that the their them themselves then theory there these they thing think third this
those though thought thousand threat three through throughout throw thus time today together
tonight too top total tough toward town trade traditional training travel treat treatment tree
trial trip trouble true truth try turn two type under understand unit until upon use usually value
various very victim view violence visit voice vote wait walk wall want war watch water way weapon
wear week weight well west western what whatever when where whether which while white who whole
whom whose why wide wife will win wind window wish with within without woman wonder word work
worker world worry would write writer wrong yard yeah year yes yet you young your yourself`)

// textGen writes text of an exact token count under one tokenizer.
type textGen struct {
	words []string // each " "+w is one token
}

func newTextGen(tok *bpe.Tokenizer) (*textGen, error) {
	g := &textGen{}
	for _, w := range candidateWords {
		if len(tok.Encode(" "+w, false)) == 1 {
			g.words = append(g.words, w)
		}
	}
	if len(g.words) < 200 {
		return nil, fmt.Errorf("routebench: only %d single-token words under this tokenizer", len(g.words))
	}
	return g, nil
}

// text returns n tokens of words drawn from rng, each with a leading space.
func (g *textGen) text(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n * 7)
	for range n {
		b.WriteByte(' ')
		b.WriteString(g.words[rng.IntN(len(g.words))])
	}
	return b.String()
}

// seeded returns a generator whose output depends only on the seeds.
func seeded(a, b uint64) *rand.Rand { return rand.New(rand.NewPCG(a, b)) }
