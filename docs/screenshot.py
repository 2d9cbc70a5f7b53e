"""Draw the screenshot the README and the quickstart use: an editor window with a dialog, as a Retina
display captures it (2880x1800 PNG, every UI pixel doubled). The same bytes on every run, so the refs the
docs show are exact.

    python docs/screenshot.py retina.png
"""

import sys

from PIL import Image, ImageDraw, ImageFont

CODE = [
    "def admit(store, images, source):",
    "    # one gate, whatever the source",
    "    for image in images:",
    "        check(image)",
    "    return store.publish(images)",
    "",
    "def read(store, ref):",
    "    data = store.fetch(ref)",
    "    verify(ref, data)",
    "    return data",
    "",
]


def draw(path: str) -> None:
    font = ImageFont.load_default_imagefont()  # a bitmap font: the same pixels with every FreeType
    ui = Image.new("RGB", (1440, 900), (246, 246, 246))
    d = ImageDraw.Draw(ui)
    d.rectangle((0, 0, 1439, 27), fill=(222, 222, 222))  # title bar
    for x, colour in ((14, (237, 106, 94)), (34, (245, 191, 79)), (54, (98, 197, 84))):
        d.ellipse((x - 6, 8, x + 6, 20), fill=colour)
    d.text((640, 8), "attachstore - admit.py", fill=(60, 60, 60), font=font)
    d.rectangle((0, 28, 219, 877), fill=(236, 236, 240))  # sidebar
    for i, name in enumerate(["README.md", "admit.py", "read.py", "gc.py", "audit.py", "docs/"]):
        if name == "admit.py":
            d.rectangle((0, 40 + 22 * i - 4, 219, 40 + 22 * i + 14), fill=(205, 220, 245))
        d.text((16, 40 + 22 * i), name, fill=(40, 40, 40), font=font)
    d.rectangle((220, 28, 1439, 877), fill=(255, 255, 255))  # editor
    for i, line in enumerate(CODE * 3):
        y = 40 + 18 * i
        d.text((232, y), f"{i + 1:>3}", fill=(160, 160, 160), font=font)
        d.text((272, y), line, fill=(30, 30, 120) if line.startswith("def") else (30, 30, 30), font=font)
    d.rectangle((520, 300, 1040, 500), fill=(250, 250, 250), outline=(180, 180, 180))  # a dialog
    d.text((548, 330), "Save changes to admit.py before closing?", fill=(20, 20, 20), font=font)
    d.text((548, 356), "Your changes will be lost if you do not save them.", fill=(90, 90, 90), font=font)
    for x, label, fill in ((760, "Don't Save", (255, 255, 255)), (880, "Save", (10, 120, 240))):
        d.rounded_rectangle((x, 450, x + 110, 478), radius=6, fill=fill, outline=(170, 170, 170))
        d.text((x + 18, 458), label, fill=(255, 255, 255) if label == "Save" else (20, 20, 20), font=font)
    d.rectangle((0, 878, 1439, 899), fill=(0, 110, 200))  # status bar
    d.text((12, 883), "main  Ln 12, Col 4  UTF-8  Python", fill=(255, 255, 255), font=font)
    ui.resize((2880, 1800), Image.Resampling.NEAREST).save(path, optimize=True)
    with Image.open(path) as made, open(path, "rb") as f:
        print(f"{path}: {made.format} {made.width}x{made.height}, {len(f.read())} bytes")


if __name__ == "__main__":
    draw(sys.argv[1] if len(sys.argv) > 1 else "retina.png")
