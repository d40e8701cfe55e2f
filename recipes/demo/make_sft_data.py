#!/usr/bin/env python3
"""The demo's business task: product title -> JSON of its attributes.

    python3 recipes/demo/make_sft_data.py OUT_DIR [--train N] [--val N] [--seed S]

Writes OUT_DIR/train.jsonl and OUT_DIR/val.jsonl as chat JSONL for
`pocket tokenize --chat`:

    {"messages": [{"role": "user", "content": "<instruction>\\n<title>"},
                  {"role": "assistant", "content": "{\\"brand\\":...}"}]}

Titles are made up, in Chinese or English, from a brand, a product category,
a colour, a size (storage, clothing size, shoe size, capacity, screen size)
and marketing filler, in a shuffled order. The answer is compact JSON with
the keys always in the order brand, category, color, size, and every value
is a span copied from the title, so a small model can learn the task in a
few minutes. The validation titles never occur in the training set.
Python 3 standard library only; the same seed gives the same files.
"""
import argparse
import json
import os
import random

KEYS = ("brand", "category", "color", "size")

ZH_COLORS = ["黑色", "白色", "红色", "蓝色", "绿色", "灰色", "粉色", "紫色", "金色", "银色", "深空灰",
             "午夜蓝", "米白色", "卡其色", "藏青色", "酒红色", "薄荷绿", "星光色"]
EN_COLORS = ["Black", "White", "Red", "Blue", "Green", "Gray", "Pink", "Purple", "Gold", "Silver",
             "Space Gray", "Midnight Blue", "Navy", "Beige", "Olive", "Burgundy", "Rose Gold", "Charcoal"]

ZH_CLOTHES = ["S", "M", "L", "XL", "XXL", "3XL", "160/84A", "170/88A", "175/92A", "180/96A"]
EN_CLOTHES = ["XS", "S", "M", "L", "XL", "XXL", "Size M", "Size L", "Size XL"]
STORAGE = ["64GB", "128GB", "256GB", "512GB", "1TB", "8GB+128GB", "8GB+256GB", "12GB+256GB", "12GB+512GB",
           "16GB+1TB"]
LAPTOP_STORAGE = ["256GB", "512GB", "1TB", "2TB", "16GB+512GB", "16GB+1TB", "32GB+1TB", "8GB+256GB"]

# Each category: its name as written in titles, the brands that make it,
# the sizes it comes in, and filler words that fit it.
ZH_CATEGORIES = [
    ("手机", ["华为", "小米", "苹果", "OPPO", "vivo", "荣耀", "三星", "一加", "魅族", "真我"], STORAGE,
     ["5G", "全网通", "旗舰", "拍照", "游戏", "长续航", "曲面屏"]),
    ("笔记本电脑", ["联想", "华为", "戴尔", "惠普", "华硕", "苹果", "小米", "宏碁", "机械革命"], LAPTOP_STORAGE,
     ["轻薄", "商务办公", "游戏本", "高性能", "学生"]),
    ("平板电脑", ["华为", "小米", "苹果", "荣耀", "联想", "三星"], STORAGE, ["护眼", "学习", "娱乐", "高刷屏"]),
    ("运动鞋", ["耐克", "阿迪达斯", "李宁", "安踏", "特步", "匹克", "鸿星尔克", "新百伦", "回力"],
     ["36码", "37码", "38码", "39码", "40码", "41码", "42码", "43码", "44码", "45码"],
     ["透气", "减震", "跑步", "休闲", "男女同款", "防滑"]),
    ("T恤", ["优衣库", "海澜之家", "森马", "太平鸟", "以纯", "李宁", "真维斯"], ZH_CLOTHES,
     ["纯棉", "短袖", "宽松", "圆领", "夏季"]),
    ("卫衣", ["优衣库", "森马", "太平鸟", "李宁", "安踏", "美特斯邦威"], ZH_CLOTHES, ["连帽", "加绒", "宽松", "秋冬"]),
    ("羽绒服", ["波司登", "雪中飞", "鸭鸭", "优衣库", "太平鸟", "高梵"], ZH_CLOTHES, ["加厚", "保暖", "长款", "冬季"]),
    ("牛仔裤", ["李维斯", "森马", "以纯", "优衣库", "真维斯"], ["28", "29", "30", "31", "32", "33", "34", "36"],
     ["直筒", "修身", "弹力", "高腰"]),
    ("保温杯", ["膳魔师", "象印", "虎牌", "富光", "哈尔斯", "苏泊尔", "乐扣乐扣"],
     ["350ml", "400ml", "480ml", "500ml", "600ml", "750ml", "1L"], ["不锈钢", "便携", "大容量", "儿童"]),
    ("电饭煲", ["美的", "苏泊尔", "九阳", "松下", "小米", "格力", "老板"], ["2L", "3L", "4L", "5L", "6L"],
     ["智能", "家用", "预约", "多功能"]),
    ("空气炸锅", ["美的", "九阳", "苏泊尔", "小熊", "飞利浦"], ["3L", "4.5L", "5L", "5.5L", "6L", "8L"],
     ["无油", "家用", "可视", "大容量"]),
    ("双肩包", ["新秀丽", "小米", "瑞士军刀", "耐克", "阿迪达斯", "卡拉羊"], ["15L", "20L", "25L", "30L", "35L", "40L"],
     ["防水", "大容量", "通勤", "旅行"]),
    ("行李箱", ["新秀丽", "外交官", "小米", "美旅", "爱华仕"], ["20寸", "22寸", "24寸", "26寸", "28寸"],
     ["万向轮", "拉杆箱", "密码锁", "登机箱"]),
    ("显示器", ["戴尔", "三星", "飞利浦", "华硕", "小米", "明基", "AOC", "LG"],
     ["24英寸", "27英寸", "32英寸", "34英寸", "23.8英寸"], ["4K", "2K", "高刷", "护眼", "IPS"]),
    ("电视", ["海信", "TCL", "小米", "创维", "索尼", "长虹", "三星"], ["43英寸", "55英寸", "65英寸", "75英寸", "85英寸"],
     ["4K", "智能", "全面屏", "语音"]),
]
EN_CATEGORIES = [
    ("Smartphone", ["Apple", "Samsung", "Xiaomi", "Huawei", "Google", "OnePlus", "Motorola", "Sony", "Nokia"],
     STORAGE, ["5G", "Unlocked", "Dual SIM", "Triple Camera", "Long Battery"]),
    ("Laptop", ["Lenovo", "Dell", "HP", "Asus", "Acer", "Apple", "Microsoft", "MSI", "Razer"], LAPTOP_STORAGE,
     ["Thin and Light", "Gaming", "Business", "Backlit Keyboard", "Touchscreen"]),
    ("Tablet", ["Apple", "Samsung", "Lenovo", "Amazon", "Xiaomi", "Microsoft"], STORAGE,
     ["Wi-Fi", "HD Display", "Kids", "Stylus Support"]),
    ("Running Shoes", ["Nike", "Adidas", "Asics", "New Balance", "Puma", "Brooks", "Hoka", "Saucony", "Reebok"],
     ["US 6", "US 7", "US 8", "US 9", "US 10", "US 11", "US 12", "EU 40", "EU 42", "EU 44", "UK 8"],
     ["Breathable", "Lightweight", "Cushioned", "Mesh", "Unisex"]),
    ("T-Shirt", ["Uniqlo", "Hanes", "Gap", "Champion", "Nike", "Levi's", "H&M"], EN_CLOTHES,
     ["Cotton", "Crew Neck", "Short Sleeve", "Slim Fit", "Classic"]),
    ("Hoodie", ["Champion", "Nike", "Adidas", "Carhartt", "Gap", "Under Armour"], EN_CLOTHES,
     ["Fleece", "Pullover", "Zip-Up", "Oversized"]),
    ("Jeans", ["Levi's", "Wrangler", "Lee", "Diesel", "Gap"], ["28W", "30W", "32W", "34W", "36W", "32x30", "34x32"],
     ["Straight Leg", "Slim Fit", "Stretch", "Relaxed"]),
    ("Water Bottle", ["Thermos", "Hydro Flask", "Stanley", "Contigo", "Yeti", "Zojirushi", "CamelBak"],
     ["12oz", "18oz", "24oz", "32oz", "40oz", "500ml", "750ml", "1L"],
     ["Insulated", "Stainless Steel", "Leak-Proof", "BPA-Free"]),
    ("Rice Cooker", ["Zojirushi", "Tiger", "Panasonic", "Cuckoo", "Aroma", "Instant Pot"],
     ["3-Cup", "5.5-Cup", "6-Cup", "10-Cup", "1L", "1.8L"], ["Fuzzy Logic", "Programmable", "Non-Stick"]),
    ("Air Fryer", ["Ninja", "Cosori", "Philips", "Instant Pot", "Chefman"], ["2QT", "4QT", "5.8QT", "6QT", "8QT"],
     ["Digital", "Oil-Free", "Dishwasher Safe", "Compact"]),
    ("Backpack", ["JanSport", "Samsonite", "Osprey", "The North Face", "Herschel", "Nike"],
     ["15L", "20L", "25L", "30L", "40L"], ["Waterproof", "Laptop Sleeve", "Travel", "School"]),
    ("Suitcase", ["Samsonite", "Delsey", "American Tourister", "Travelpro", "Away"],
     ["20-inch", "22-inch", "24-inch", "26-inch", "28-inch"], ["Hardside", "Spinner Wheels", "TSA Lock", "Carry-On"]),
    ("Monitor", ["Dell", "Samsung", "LG", "Asus", "BenQ", "Acer", "ViewSonic"],
     ["24-inch", "27-inch", "32-inch", "34-inch", "23.8-inch"], ["4K", "144Hz", "IPS", "Curved", "USB-C"]),
    ("Headphones", ["Sony", "Bose", "Sennheiser", "Apple", "JBL", "Beats", "Audio-Technica"],
     ["Over-Ear", "On-Ear", "In-Ear"], ["Wireless", "Noise Cancelling", "Bluetooth", "Foldable"]),
    ("TV", ["Samsung", "LG", "Sony", "TCL", "Hisense", "Vizio"], ["43-inch", "50-inch", "55-inch", "65-inch", "75-inch"],
     ["4K UHD", "Smart", "HDR", "OLED"]),
]
ZH_FILLER = ["2024新款", "官方正品", "旗舰店", "包邮", "限时特惠", "新品", "爆款", "官方旗舰", "正品保障", "热销"]
EN_FILLER = ["New", "2024", "Official", "Free Shipping", "Best Seller", "Latest Model", "Gift", "Sale"]
ZH_INSTRUCTIONS = ["从商品标题中提取属性，输出JSON：", "提取以下商品的品牌、品类、颜色和尺寸，以JSON输出："]
EN_INSTRUCTIONS = ["Extract the product attributes as JSON:", "Return the brand, category, color and size of this "
                   "product as JSON:"]


def make_title(rng, lang):
    """One title and its attributes. The brand leads (as shop titles do),
    the other parts come in a random order with one or two filler words."""
    cats, colors, filler = (ZH_CATEGORIES, ZH_COLORS, ZH_FILLER) if lang == "zh" else \
        (EN_CATEGORIES, EN_COLORS, EN_FILLER)
    category, brands, sizes, extras = rng.choice(cats)
    attrs = {"brand": rng.choice(brands), "category": category, "color": rng.choice(colors),
             "size": rng.choice(sizes)}
    parts = [attrs["category"], attrs["color"], attrs["size"]]
    parts += rng.sample(extras, rng.randint(1, 2))
    if rng.random() < 0.6:
        parts.append(rng.choice(filler))
    rng.shuffle(parts)
    parts.insert(0, attrs["brand"])
    title = " ".join(parts)
    return title, attrs


def example(rng, lang):
    title, attrs = make_title(rng, lang)
    instruction = rng.choice(ZH_INSTRUCTIONS if lang == "zh" else EN_INSTRUCTIONS)
    answer = json.dumps({k: attrs[k] for k in KEYS}, ensure_ascii=False, separators=(",", ":"))
    return title, {"messages": [{"role": "user", "content": instruction + "\n" + title},
                                {"role": "assistant", "content": answer}]}


def generate(n_train, n_val, seed, make=None):
    """make(rng, lang) -> (title, chat row): example by default (multi-lora/ makes another task)."""
    make = make or example
    rng = random.Random(seed)
    seen, train, val = set(), [], []
    # Validation first, so its titles are reserved before training is drawn.
    for target, out in ((n_val, val), (n_train, train)):
        while len(out) < target:
            title, ex = make(rng, "zh" if rng.random() < 0.5 else "en")
            if title in seen:
                continue
            seen.add(title)
            out.append(ex)
    return train, val


def write_jsonl(path, rows):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def check(rows):
    """Every value is copied from the title; keys come in the fixed order."""
    for r in rows:
        title = r["messages"][0]["content"].split("\n", 1)[1]
        ans = json.loads(r["messages"][1]["content"])
        assert tuple(ans) == KEYS, ans
        for v in ans.values():
            assert v in title, (v, title)


def write_task(doc, generate_sets, check_rows, n_train, n_val, seed):
    """The command line of a task writer (this one's, recipes/spec/make_extract_data.py's): OUT_DIR, --train,
    --val and --seed; generate_sets(n_train, n_val, seed) -> (train, val), each checked by check_rows, then written
    to OUT_DIR/train.jsonl and val.jsonl."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--train", type=int, default=n_train)
    ap.add_argument("--val", type=int, default=n_val)
    ap.add_argument("--seed", type=int, default=seed)
    args = ap.parse_args()
    train, val = generate_sets(args.train, args.val, args.seed)
    check_rows(train)
    check_rows(val)
    os.makedirs(args.out_dir, exist_ok=True)
    write_jsonl(os.path.join(args.out_dir, "train.jsonl"), train)
    write_jsonl(os.path.join(args.out_dir, "val.jsonl"), val)
    print("  wrote %d training and %d held-out examples to %s" % (len(train), len(val), args.out_dir))


def main():
    write_task(__doc__, generate, check, 3000, 200, 20250101)


if __name__ == "__main__":
    main()
